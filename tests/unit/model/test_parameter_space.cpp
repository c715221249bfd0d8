// The parameter space: aligned offsets, units padded to 64 x ranks, shards, relayout keeping
// values and gradients, parameters as views, released and bound gradients, and bad input.
#include <catch2/catch.hpp>

#include <memory>
#include <vector>

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
}
