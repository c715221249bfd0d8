#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>

#include "loom/core/shape.hpp"
#include "support/tensor_checks.hpp"

using loom::ErrorCategory;
using loom::Shape;
using loom::test::IsError;

TEST_CASE("shapes count elements in 64 bits", "[shape]") {
  CHECK(Shape().numel() == 1);
  CHECK(Shape().rank() == 0);
  CHECK(Shape{2, 3, 4}.numel() == 24);
  CHECK(Shape{5, 0, 7}.numel() == 0);
  const std::int64_t big = std::int64_t{1} << 40;
  CHECK(Shape{big, 4}.numel() == big * 4);  // beyond 32 bits
  CHECK(Shape{2, 3}.to_string() == "(2, 3)");
  CHECK(Shape().to_string() == "()");
  CHECK(Shape{2, 3} == Shape(std::vector<std::int64_t>{2, 3}));
}

TEST_CASE("shape indexing is checked and accepts negative dimensions", "[shape]") {
  const Shape shape{2, 3, 4};
  CHECK(shape[0] == 2);
  CHECK(shape[-1] == 4);
  CHECK_THROWS_MATCHES(shape[3], loom::Error, IsError(ErrorCategory::invalid_argument, {"dimension 3", "(2, 3, 4)"}));
  CHECK_THROWS_AS(shape[-4], loom::Error);
}

TEST_CASE("invalid shapes are rejected with the offending extent", "[shape]") {
  CHECK_THROWS_MATCHES((Shape{2, -3}), loom::Error, IsError(ErrorCategory::invalid_argument, {"extent 1", "-3"}));
  const std::int64_t max = std::numeric_limits<std::int64_t>::max();
  CHECK_THROWS_MATCHES((Shape{max, 2}), loom::Error, IsError(ErrorCategory::invalid_argument, {"2^63-1"}));
  CHECK_NOTHROW(Shape{max, 1});
  CHECK_NOTHROW(Shape{max, 0});
}
