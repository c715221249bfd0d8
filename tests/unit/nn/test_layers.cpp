// Gradients of each nn layer against directional finite differences of its own fp32 forward
// (tests/unit/nn/gradient_check.hpp), on the CPU: the input gradient and every parameter.
#include <catch2/catch.hpp>

#include <memory>
#include <random>
#include <vector>

#include "loom/nn/attention.hpp"
#include "loom/nn/block.hpp"
#include "loom/nn/layernorm.hpp"
#include "loom/nn/linear.hpp"
#include "loom/model/parameter_space.hpp"
#include "unit/nn/gradient_check.hpp"

using loom::DType;
using loom::Shape;
using loom::Tensor;
using loom::nn::Parameter;
using loom::nn::Precision;

namespace {

Tensor random_f32(const Shape& shape, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  Tensor t = Tensor::empty(shape, DType::f32);
  for (float& v : t.span<float>()) v = dist(rng);
  return t;
}

// Gives the layer's parameters (descriptions) storage, initialised as the layer declares (a model
// does this through its parameter space), then moves every one away from its initialisation, so
// every path carries signal. The space must outlive the layer's use.
template <class Layer>
std::unique_ptr<loom::model::ParameterSpace> randomize(Layer& layer, std::mt19937& rng, float scale) {
  std::vector<Parameter*> params;
  layer.collect_parameters(params);
  auto space = std::make_unique<loom::model::ParameterSpace>(std::vector<loom::model::UnitSpec>{{"layer", params}});
  space->initialize(1);
  for (Parameter* p : params) {
    std::normal_distribution<float> dist(0.0f, scale);
    for (float& v : p->value().span<float>()) v += dist(rng);
  }
  return space;
}

// objective(y) = sum(weights * y) in double, so dL/dy = weights.
double weighted_sum(const Tensor& y, const Tensor& weights) {
  const std::vector<float> a = y.to_vector<float>(), w = weights.to_vector<float>();
  double sum = 0;
  for (std::size_t i = 0; i < a.size(); ++i) sum += static_cast<double>(a[i]) * w[i];
  return sum;
}

// Runs forward + backward once for the analytic gradients, then checks x and every parameter.
template <class Layer>
void check_layer(Layer& layer, const Tensor& x, std::mt19937& rng, double h, double rel, double abs) {
  std::vector<Parameter*> params;
  layer.collect_parameters(params);
  const Tensor y = layer.forward(x);
  const Tensor weights = random_f32(y.shape(), rng);
  const Tensor dx = layer.backward(weights).clone();
  auto objective = [&] { return weighted_sum(layer.forward(x), weights); };
  loom::test::require_directional("input", loom::test::directional_derivative(x, dx, objective, rng, h), rel, abs);
  for (Parameter* p : params) {
    loom::test::require_directional(p->name(), loom::test::directional_derivative(p->value(), p->grad(), objective, rng, h),
                                    rel, abs);
  }
}

}  // namespace

TEST_CASE("Linear gradients match finite differences, with and without fused GELU", "[nn][gradients]") {
  std::mt19937 rng(1);
  for (bool gelu : {false, true}) {
    INFO("gelu " << gelu);
    loom::nn::Linear layer("fc", 7, 5, {.bias = true, .gelu = gelu}, Precision::fp32(), loom::Device::cpu());
    const auto space = randomize(layer, rng, 0.5f);
    check_layer(layer, random_f32({2, 3, 7}, rng), rng, 1e-2, 2e-3, 2e-3);
  }
}

TEST_CASE("LayerNorm gradients match finite differences", "[nn][gradients]") {
  std::mt19937 rng(2);
  loom::nn::LayerNorm layer("ln", 9, Precision::fp32(), loom::Device::cpu());
  const auto space = randomize(layer, rng, 0.5f);
  check_layer(layer, random_f32({5, 9}, rng, 2.0f), rng, 1e-2, 2e-3, 2e-3);
}

TEST_CASE("causal self-attention gradients match finite differences", "[nn][gradients]") {
  std::mt19937 rng(3);
  loom::nn::CausalSelfAttention layer("attn", 8, 2, Precision::fp32(), loom::Device::cpu());
  const auto space = randomize(layer, rng, 0.3f);
  check_layer(layer, random_f32({2, 5, 8}, rng), rng, 1e-2, 2e-3, 2e-3);
}

TEST_CASE("transformer block gradients match finite differences", "[nn][gradients]") {
  std::mt19937 rng(4);
  loom::nn::TransformerBlock block("h0", 8, 2, Precision::fp32(), loom::Device::cpu());
  const auto space = randomize(block, rng, 0.3f);
  check_layer(block, random_f32({2, 5, 8}, rng), rng, 3e-3, 2e-3, 2e-3);
}

TEST_CASE("a second backward accumulates exactly: gradients double", "[nn][gradients]") {
  std::mt19937 rng(5);
  loom::nn::TransformerBlock block("h0", 8, 2, Precision::fp32(), loom::Device::cpu());
  const auto space = randomize(block, rng, 0.3f);
  std::vector<Parameter*> params;
  block.collect_parameters(params);
  const Tensor x = random_f32({2, 5, 8}, rng), dy = random_f32({2, 5, 8}, rng);
  block.forward(x);
  block.backward(dy);
  std::vector<std::vector<float>> once;
  for (Parameter* p : params) once.push_back(p->grad().to_vector<float>());
  block.forward(x);
  block.backward(dy);
  for (std::size_t i = 0; i < params.size(); ++i) {
    INFO(params[i]->name());
    std::vector<float> doubled = once[i];
    for (float& v : doubled) v *= 2;
    REQUIRE(params[i]->grad().to_vector<float>() == doubled);
  }
  for (Parameter* p : params) p->zero_grad();
  for (Parameter* p : params) {
    for (float v : p->grad().to_vector<float>()) REQUIRE(v == 0.0f);
  }
}

TEST_CASE("layers reject inputs of the wrong width, backward before forward, and parameters without storage", "[nn]") {
  loom::nn::Linear layer("fc", 4, 3, {}, Precision::fp32(), loom::Device::cpu());
  REQUIRE_FALSE(layer.weight().has_value());  // a description until a parameter space binds it
  REQUIRE_THROWS_WITH(layer.forward(Tensor::zeros({2, 4}, DType::f32)),
                      Catch::Contains("'fc.weight' has no storage") && Catch::Contains("ParameterSpace"));
  loom::nn::LayerNorm norm("ln", 4, Precision::fp32(), loom::Device::cpu());
  REQUIRE_THROWS_WITH(norm.forward(Tensor::zeros({2, 4}, DType::f32)), Catch::Contains("'ln.weight' has no storage"));
  const loom::model::ParameterSpace space({{"fc", {&layer.weight()}}});
  REQUIRE_THROWS_WITH(layer.backward(Tensor::zeros({2, 3}, DType::f32)), Catch::Contains("backward before forward"));
  REQUIRE_THROWS_WITH(layer.forward(Tensor::zeros({2, 5}, DType::f32)),
                      Catch::Contains("fc.weight") && Catch::Contains("must end in 4"));
}
