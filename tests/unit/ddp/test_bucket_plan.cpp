// The bucket plan over a parameter space: backward order (the reverse of the space's), caps,
// contiguous ranges, one bucket per gradient at cap 0, one bucket per unit for ZeRO.
#include <catch2/catch.hpp>

#include <memory>
#include <vector>

#include "loom/model/parameter_space.hpp"
#include "loom/ddp/bucket_scheduler.hpp"

using loom::DType;
using loom::Tensor;
using loom::ddp::buckets_by_size;
using loom::ddp::buckets_by_unit;
using loom::model::Parameter;
using loom::model::ParameterSpace;

namespace {

struct TwoUnits {
  std::vector<std::unique_ptr<Parameter>> owned;
  std::unique_ptr<ParameterSpace> space;
  // unit "a": p0 (10), p1 (300); unit "b": p2 (64), p3 (1), p4 (200).
  explicit TwoUnits(int ranks = 1) {
    const std::vector<std::int64_t> numels{10, 300, 64, 1, 200};
    for (std::size_t i = 0; i < numels.size(); ++i) {
      std::string name = "p";  // (not "p" + to_string: GCC 12 warns falsely about that, -Wrestrict)
      name += std::to_string(i);
      owned.push_back(std::make_unique<Parameter>(name, Tensor::zeros({numels[i]}, DType::f32),
                                                  DType::f32, true));
    }
    space = std::make_unique<ParameterSpace>(
        std::vector<loom::model::UnitSpec>{{"a", {owned[0].get(), owned[1].get()}},
                                           {"b", {owned[2].get(), owned[3].get(), owned[4].get()}}},
        ranks);
  }
};

}  // namespace

TEST_CASE("gradients fill buckets in backward order until each cap is reached, as ranges of the space", "[ddp]") {
  const TwoUnits model;
  // Offsets: p0 0, p1 64, (unit a ends at 384); p2 384, p3 448, p4 512, unit b ends at 768.
  REQUIRE(model.space->slots()[4].offset == 512);
  // First cap 800 bytes = 200 floats: p4 alone. Then 1200 bytes = 300 floats: p3 + p2 + p1 (365).
  const auto plan = buckets_by_size(*model.space, 1200, 800);
  REQUIRE(plan.size() == 3);
  CHECK(plan[0].slots == std::vector<std::size_t>{4});
  CHECK((plan[0].begin == 512 && plan[0].end == 712));
  CHECK(plan[1].slots == std::vector<std::size_t>{3, 2, 1});
  CHECK((plan[1].begin == 64 && plan[1].end == 449));
  CHECK(plan[2].slots == std::vector<std::size_t>{0});
  CHECK((plan[2].begin == 0 && plan[2].end == 10));
}

TEST_CASE("a cap of zero gives every gradient its own bucket", "[ddp]") {
  const TwoUnits model;
  const auto plan = buckets_by_size(*model.space, 0, 0);
  REQUIRE(plan.size() == 5);
  for (std::size_t b = 0; b < 5; ++b) CHECK(plan[b].slots == std::vector<std::size_t>{4 - b});
}

TEST_CASE("by_unit gives one bucket per padded unit, last unit first", "[ddp]") {
  const TwoUnits model(3);  // units padded to multiples of 192: 384 each
  const auto plan = buckets_by_unit(*model.space);
  REQUIRE(plan.size() == 2);
  CHECK(plan[0].unit == 1);
  CHECK(plan[0].slots == std::vector<std::size_t>{4, 3, 2});
  CHECK((plan[0].begin == 384 && plan[0].end == 768));
  CHECK(plan[1].unit == 0);
  CHECK((plan[1].begin == 0 && plan[1].end == 384));
}
