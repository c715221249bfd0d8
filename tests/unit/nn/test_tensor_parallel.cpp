// Megatron's tensor-parallel MLP (nn/tensor_parallel.hpp: column-parallel fc with GELU, then
// row-parallel proj) over 1-4 in-process ranks against the same MLP of nn::Linear in one process:
// every rank's weight blocks are initialised to exactly its box of the whole weights (from the
// same seed), and the output, the input gradient and every parameter's gradient (each rank's
// block, and the whole replicated bias of proj) match within 1e-5 (fp32; the sums run in another
// order). Also: a split that does not divide is refused by name.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "loom/comm/in_process.hpp"
#include "loom/model/parameter_space.hpp"
#include "loom/nn/linear.hpp"
#include "loom/nn/tensor_parallel.hpp"
#include "support/error_message.hpp"

using loom::DType;
using loom::Tensor;
using loom::nn::Parameter;
using loom::nn::Precision;

namespace {

constexpr std::int64_t width = 12, hidden = 24;

Tensor random_f32(const loom::Shape& shape, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  Tensor t = Tensor::empty(shape, DType::f32);
  for (float& v : t.span<float>()) v = dist(rng);
  return t;
}

// Biases start at 0; give element j of a bias (global index) 0.01 (j + 1) so they carry signal.
void set_bias(Parameter& bias) {
  const std::int64_t first = bias.partition().offset[0];
  float* v = bias.value().data<float>();
  for (std::int64_t j = 0; j < bias.numel(); ++j) v[j] = 0.01f * static_cast<float>(first + j + 1);
}

// Rows [r0, r0 + n) (dim 0) or columns [c0, c0 + n) (dim 1) of a [rows, cols] tensor, flat.
std::vector<float> block(const Tensor& t, int dim, std::int64_t first, std::int64_t n) {
  const std::vector<float> all = t.to_vector<float>();
  const std::int64_t cols = t.shape()[t.rank() - 1], rows = t.rank() == 1 ? 1 : t.shape()[0];
  std::vector<float> out;
  if (t.rank() == 1) return {all.begin() + first, all.begin() + first + n};
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      if ((dim == 0 && r >= first && r < first + n) || (dim == 1 && c >= first && c < first + n)) {
        out.push_back(all[static_cast<std::size_t>(r * cols + c)]);
      }
    }
  }
  return out;
}

std::string differs(const char* what, const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return std::string(what) + ": sizes differ; ";
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::fabs(got[i] - want[i]) > 1e-5 * (1.0 + std::fabs(want[i]))) {
      return std::string(what) + " differs at " + std::to_string(i) + ": " + std::to_string(got[i]) + " vs " +
             std::to_string(want[i]) + "; ";
    }
  }
  return "";
}

}  // namespace

TEST_CASE("a column-then-row tensor-parallel MLP over 1-4 ranks is the one-process MLP", "[nn][tensor_parallel]") {
  const Precision fp32 = Precision::fp32();
  const Tensor x = random_f32({2, 3, width}, 1), dy = random_f32({2, 3, width}, 2);
  // One process.
  loom::nn::Linear fc("mlp.fc", width, hidden, {.bias = true, .gelu = true}, fp32, loom::Device::cpu());
  loom::nn::Linear proj("mlp.proj", hidden, width, {.bias = true}, fp32, loom::Device::cpu());
  std::vector<Parameter*> params;
  fc.collect_parameters(params);
  proj.collect_parameters(params);
  loom::model::ParameterSpace space({{"mlp", params}});
  space.initialize(7);
  set_bias(*fc.bias());
  set_bias(*proj.bias());
  const std::vector<float> y = proj.forward(fc.forward(x)).to_vector<float>();
  const std::vector<float> dx = fc.backward(proj.backward(dy)).to_vector<float>();
  for (const int ranks : {1, 2, 3, 4}) {
    std::vector<std::string> problems(static_cast<std::size_t>(ranks));
    loom::comm::run_in_process(ranks, [&](loom::comm::Communicator& tensor) {
      std::string& problem = problems[static_cast<std::size_t>(tensor.rank())];
      loom::nn::ColumnParallelLinear col("mlp.fc", width, hidden, {.bias = true, .gelu = true}, fp32,
                                         loom::Device::cpu(), &tensor);
      loom::nn::RowParallelLinear row("mlp.proj", hidden, width, true, fp32, loom::Device::cpu(), &tensor);
      std::vector<Parameter*> mine;
      col.collect_parameters(mine);
      row.collect_parameters(mine);
      loom::model::ParameterSpace local({{"mlp", mine}});
      local.initialize(7);
      set_bias(*col.bias());
      set_bias(*row.bias());
      const std::int64_t h = hidden / ranks, first = h * tensor.rank();
      if (col.weight().value().to_vector<float>() != block(fc.weight().value(), 0, first, h)) problem += "fc init; ";
      if (row.weight().value().to_vector<float>() != block(proj.weight().value(), 1, first, h)) problem += "proj init; ";
      problem += differs("y", row.forward(col.forward(x)).to_vector<float>(), y);
      problem += differs("dx", col.backward(row.backward(dy)).to_vector<float>(), dx);
      problem += differs("fc.weight grad", col.weight().grad().to_vector<float>(), block(fc.weight().grad(), 0, first, h));
      problem += differs("fc.bias grad", col.bias()->grad().to_vector<float>(), block(fc.bias()->grad(), 0, first, h));
      problem += differs("proj.weight grad", row.weight().grad().to_vector<float>(), block(proj.weight().grad(), 1, first, h));
      problem += differs("proj.bias grad", row.bias()->grad().to_vector<float>(), proj.bias()->grad().to_vector<float>());
    });
    INFO(ranks << " ranks");
    CHECK(problems == std::vector<std::string>(static_cast<std::size_t>(ranks)));
  }
}

TEST_CASE("a tensor-parallel split that does not divide is refused by name", "[nn][tensor_parallel]") {
  std::vector<std::string> errors(3);
  loom::comm::run_in_process(3, [&](loom::comm::Communicator& tensor) {
    errors[static_cast<std::size_t>(tensor.rank())] = loom::test::error_message([&] {
      loom::nn::ColumnParallelLinear col("mlp.fc", width, 20, {}, Precision::fp32(), loom::Device::cpu(), &tensor);
    });
  });
  for (const std::string& e : errors) CHECK_THAT(e, Catch::Contains("'mlp.fc': output features 20 do not divide over the 3"));
}
