#include <catch2/catch.hpp>

#include <set>
#include <sstream>
#include <string>

#include "loom/core/dtype.hpp"
#include "support/tensor_checks.hpp"

using loom::DType;
using loom::test::IsError;

TEST_CASE("dtype sizes match their C++ storage types", "[dtype]") {
  CHECK(loom::dtype_size(DType::f32) == sizeof(float));
  CHECK(loom::dtype_size(DType::f16) == sizeof(loom::half));
  CHECK(loom::dtype_size(DType::bf16) == sizeof(loom::bfloat16));
  CHECK(loom::dtype_size(DType::i32) == sizeof(std::int32_t));
  CHECK(loom::dtype_size(DType::i64) == sizeof(std::int64_t));
  CHECK(loom::dtype_size(DType::u8) == 1);
  CHECK(loom::dtype_size(DType::u16) == 2);
  STATIC_REQUIRE(loom::dtype_of<float> == DType::f32);
  STATIC_REQUIRE(loom::dtype_of<loom::bfloat16> == DType::bf16);
  STATIC_REQUIRE(loom::dtype_of<std::uint16_t> == DType::u16);
}

TEST_CASE("only f32, f16 and bf16 are floating point", "[dtype]") {
  std::set<DType> floating;
  for (DType dtype : loom::all_dtypes) {
    if (loom::is_floating_point(dtype)) floating.insert(dtype);
  }
  CHECK(floating == std::set<DType>{DType::f32, DType::f16, DType::bf16});
}

TEST_CASE("every dtype's name parses back to it", "[dtype]") {
  std::set<std::string> names;
  for (DType dtype : loom::all_dtypes) {
    const std::string name(loom::dtype_name(dtype));
    names.insert(name);
    CHECK(loom::parse_dtype(name) == dtype);
    std::ostringstream out;
    out << dtype;
    CHECK(out.str() == name);
  }
  CHECK(names.size() == std::size(loom::all_dtypes));
}

TEST_CASE("dtype aliases users type are accepted, case-insensitively", "[dtype]") {
  CHECK(loom::parse_dtype("float32") == DType::f32);
  CHECK(loom::parse_dtype("FP32") == DType::f32);
  CHECK(loom::parse_dtype("half") == DType::f16);
  CHECK(loom::parse_dtype("fp16") == DType::f16);
  CHECK(loom::parse_dtype("BFloat16") == DType::bf16);
  CHECK(loom::parse_dtype("int64") == DType::i64);
  CHECK(loom::parse_dtype("uint8") == DType::u8);
}

TEST_CASE("an unknown dtype name is an error that lists the accepted ones", "[dtype]") {
  CHECK_THROWS_MATCHES(loom::parse_dtype("fp8"), loom::Error,
                       IsError(loom::ErrorCategory::invalid_argument, {"'fp8'", "f32", "bf16", "u16"}));
  CHECK_THROWS_AS(loom::parse_dtype(""), loom::Error);
}
