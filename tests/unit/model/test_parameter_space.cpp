// The parameter space: aligned offsets, units padded to 64 x ranks, shards, relayout keeping
// values and gradients, parameters as views, released and bound gradients, and bad input.
#include <catch2/catch.hpp>

#include <memory>
#include <vector>

#include "loom/core/allocator.hpp"
#include "loom/core/tensor_ops.hpp"
#include "loom/model/parameter_space.hpp"
#include "support/tensor_checks.hpp"

using loom::DType;
using loom::Tensor;
using loom::model::Parameter;
using loom::model::ParameterSpace;
using loom::model::UnitSpec;

namespace {

std::vector<std::unique_ptr<Parameter>> make(const std::vector<std::int64_t>& numels, DType dtype = DType::f32) {
  std::vector<std::unique_ptr<Parameter>> out;
  for (std::size_t i = 0; i < numels.size(); ++i) {
    std::vector<double> values;
    for (std::int64_t k = 0; k < numels[i]; ++k) values.push_back(static_cast<double>(100 * i + k % 50));
    std::string name = "w";  // (not "w" + to_string: GCC 12 warns falsely about that, -Wrestrict)
    name += std::to_string(i);
    out.push_back(std::make_unique<Parameter>(name,
                                              loom::from_doubles(values, dtype).view({numels[i]}), DType::f32, true));
  }
  return out;
}

}  // namespace

TEST_CASE("a parameter space lays parameters out aligned, pads units to 64 x ranks, and keeps the values", "[model]") {
  auto p = make({70, 5, 130});
  ParameterSpace space({{"first", {p[0].get(), p[1].get()}}, {"second", {p[2].get()}}});
  // first: w0 at 0 (70 -> 128), w1 at 128 (5 -> 192); second: w2 at 192, 130 -> 192 + 192.
  CHECK(space.slots()[1].offset == 128);
  CHECK(space.units()[0].elements == 192);
  CHECK(space.units()[1].begin == 192);
  CHECK(space.elements() == 384);
  CHECK(space.parameter_elements() == 205);
  CHECK(loom::to_doubles(p[2]->value())[129] == 229);
  // Values and gradients are views of the flat buffers.
  loom::fill(space.grads(), 0.0);
  loom::fill(p[1]->grad(), 3.0);
  CHECK(loom::to_doubles(space.grads())[128] == 3.0);
  CHECK(loom::to_doubles(space.grads())[133] == 0.0);  // alignment gap

  space.repartition(4);  // units padded to multiples of 256
  CHECK(space.units()[0].elements == 256);
  CHECK(space.units()[1].begin == 256);
  CHECK(space.elements() == 512);
  CHECK(space.elements_at(4) == 512);
  CHECK(space.elements_at(1) == 384);
  CHECK(loom::to_doubles(p[2]->value())[129] == 229);  // kept
  CHECK(loom::to_doubles(p[1]->grad())[4] == 3.0);     // kept
  const auto shard = space.shard(3);
  REQUIRE(shard.size() == 2);
  CHECK((shard[0].begin == 192 && shard[0].end == 256 && shard[0].local == 0));
  CHECK((shard[1].begin == 448 && shard[1].end == 512 && shard[1].local == 64));
  CHECK(space.shard_elements() == 128);
}

TEST_CASE("released gradients live where a unit is bound", "[model]") {
  auto p = make({10, 20});
  ParameterSpace space({{"a", {p[0].get()}}, {"b", {p[1].get()}}});
  space.release_grads();
  CHECK_FALSE(p[0]->has_grad());
  CHECK_FALSE(space.grads_allocated());
  const Tensor buffer = Tensor::zeros({64}, DType::f32);
  space.bind_unit_grads(1, buffer);
  loom::fill(p[1]->grad(), 2.0);
  CHECK(loom::to_doubles(buffer)[19] == 2.0);
  CHECK(loom::to_doubles(buffer)[20] == 0.0);
  CHECK_THROWS_WITH(space.bind_unit_grads(0, Tensor::zeros({10}, DType::f32)), Catch::Contains("64 f32 elements"));
  space.bind_unit_grads(1, Tensor());
  CHECK_FALSE(p[1]->has_grad());
  space.allocate_grads();
  CHECK(p[1]->has_grad());
}

TEST_CASE("a parameter space refuses bad input with named errors", "[model]") {
  auto p = make({4, 4});
  auto bf = make({4}, DType::bf16);
  CHECK_THROWS_WITH(ParameterSpace(std::vector<UnitSpec>{}), Catch::Contains("no units"));
  CHECK_THROWS_WITH(ParameterSpace(std::vector<UnitSpec>{{"empty", {}}}), Catch::Contains("'empty' has no parameters"));
  CHECK_THROWS_WITH(ParameterSpace({{"a", {p[0].get()}}, {"b", {p[0].get()}}}), Catch::Contains("'w0' is listed twice"));
  CHECK_THROWS_WITH(ParameterSpace({{"a", {p[0].get(), bf[0].get()}}}), Catch::Contains("same device and dtype"));
  ParameterSpace space({{"a", {p[0].get(), p[1].get()}}});
  CHECK_THROWS_WITH(space.repartition(0), Catch::Contains("ranks must be >= 1"));
  CHECK_THROWS_WITH(space.shard(1), Catch::Contains("rank 1 is outside"));
  CHECK_THROWS_WITH(ParameterSpace({{"b", {bf[0].get()}}}, loom::model::SpaceLayout{.ranks = 2, .rank = 2}),
                    Catch::Contains("rank 2 of 2 is not a rank of the layout"));
  space.claim("engine A");
  CHECK_THROWS_WITH(space.claim("engine B"), Catch::Contains("engine B") && Catch::Contains("engine A holds them"));
  space.end_claim();
  space.claim("engine B");
}

TEST_CASE("a space built in a layout allocates only what the layout keeps", "[model]") {
  using loom::model::SpaceLayout;
  using loom::model::ValueMode;
  // Descriptions (no storage) of 70 and 130 elements in two units: at 2 ranks, 128 + 256 elements.
  auto described = [] {
    std::vector<std::unique_ptr<Parameter>> out;
    out.push_back(std::make_unique<Parameter>("a", loom::Shape{70}, DType::f32, loom::Device::cpu(), true));
    out.push_back(std::make_unique<Parameter>("b", loom::Shape{130}, DType::f32, loom::Device::cpu(), true));
    return out;
  };
  auto units = [](const std::vector<std::unique_ptr<Parameter>>& p) {
    return std::vector<UnitSpec>{{"u0", {p[0].get()}}, {"u1", {p[1].get()}}};
  };
  const auto p1 = described();
  const ParameterSpace no_grads(units(p1), SpaceLayout{.ranks = 2, .rank = 1, .grads = false});
  CHECK(no_grads.elements() == 384);
  CHECK(no_grads.values().numel() == 384);
  CHECK_FALSE(no_grads.grads_allocated());
  CHECK_FALSE(p1[0]->has_grad());
  const auto p2 = described();
  const std::int64_t live_before = loom::cpu_memory_stats().live_bytes;
  loom::reset_cpu_memory_peak();
  ParameterSpace sharded(units(p2), SpaceLayout{.ranks = 2, .rank = 1, .values = ValueMode::sharded});
  // Only rank 1's halves of both units (192 f32) and the gradients (384 f32), never the full values.
  CHECK(loom::cpu_memory_stats().peak_bytes - live_before == (192 + 384) * 4);
  CHECK(sharded.value_mode() == ValueMode::sharded);
  CHECK(sharded.value_rank() == 1);
  CHECK(sharded.local_values().numel() == 192);
  CHECK_FALSE(sharded.values().defined());
  CHECK_FALSE(p2[0]->has_value());
  CHECK(sharded.grads_allocated());
  CHECK(p2[0]->has_grad());
  // Parameters that have values are stored whole, then sharded: rank 1's slice of unit 0 is
  // elements 64..127 of [w0 (70 values), padding].
  auto p = make({70});
  const ParameterSpace from_values({{"u0", {p[0].get()}}}, SpaceLayout{.ranks = 2, .rank = 1, .values = ValueMode::sharded});
  const std::vector<double> slice = loom::to_doubles(from_values.unit_slice_values(0, 1));
  REQUIRE(slice.size() == 64);
  CHECK(slice[0] == 14.0);  // element 64 of w0: 64 % 50
  CHECK(slice[5] == 19.0);
  CHECK(slice[6] == 0.0);   // padding
}
