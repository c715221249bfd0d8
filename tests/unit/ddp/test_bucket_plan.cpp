// The bucket plan: fill order, caps, alignment, one bucket per gradient at cap 0, bad orders.
#include <catch2/catch.hpp>

#include <vector>

#include "src/ddp/bucket_plan.hpp"
#include "support/tensor_checks.hpp"

using loom::ddp::detail::plan_buckets;

TEST_CASE("gradients fill buckets in ready order until each cap is reached, at aligned offsets", "[ddp]") {
  const std::vector<std::int64_t> numels{10, 300, 64, 1, 200};
  const std::vector<std::size_t> order{4, 3, 2, 1, 0};
  // First cap 800 bytes = 200 floats: p4 alone. Then 1200 bytes = 300 floats: p3 + p2 + p1 (365).
  const auto plan = plan_buckets(order, numels, 4, 1200, 800);
  REQUIRE(plan.size() == 3);
  CHECK(plan[0].parameters == std::vector<std::size_t>{4});
  CHECK(plan[0].elements == 256);
  CHECK(plan[1].parameters == std::vector<std::size_t>{3, 2, 1});
  CHECK(plan[1].offsets == std::vector<std::int64_t>{0, 64, 128});
  CHECK(plan[1].elements == 448);
  CHECK(plan[2].parameters == std::vector<std::size_t>{0});
  CHECK(plan[2].elements == 64);
}

TEST_CASE("a cap of zero gives every gradient its own bucket", "[ddp]") {
  const std::vector<std::int64_t> numels{5, 6, 7};
  const std::vector<std::size_t> order{0, 1, 2};
  const auto plan = plan_buckets(order, numels, 4, 0, 0);
  REQUIRE(plan.size() == 3);
  for (std::size_t b = 0; b < 3; ++b) CHECK(plan[b].parameters == std::vector<std::size_t>{b});
}

TEST_CASE("a bucket plan refuses an order that is not a permutation", "[ddp]") {
  const std::vector<std::int64_t> numels{5, 6, 7};
  const std::vector<std::size_t> repeated{0, 1, 1}, short_order{0, 1}, out_of_range{0, 1, 3};
  CHECK_THROWS_MATCHES(plan_buckets(repeated, numels, 4, 100, 100), loom::Error,
                       loom::test::IsError(loom::ErrorCategory::invalid_argument, {"not a permutation", "index 1"}));
  CHECK_THROWS_MATCHES(plan_buckets(short_order, numels, 4, 100, 100), loom::Error,
                       loom::test::IsError(loom::ErrorCategory::invalid_argument, {"names 2 parameters", "there are 3"}));
  CHECK_THROWS_MATCHES(plan_buckets(out_of_range, numels, 4, 100, 100), loom::Error,
                       loom::test::IsError(loom::ErrorCategory::invalid_argument, {"index 3"}));
}
