// nn::MseLoss and nn::CrossEntropyLoss against fp64 formulas computed here: the mean loss, the
// gradient times the loss scale, 16-bit inputs, ignored rows, and the errors a user meets.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "loom/core/error.hpp"
#include "loom/kernels/cast.hpp"
#include "loom/nn/loss.hpp"
#include "support/error_message.hpp"

using loom::DType;
using loom::Shape;
using loom::Tensor;

namespace {

std::vector<float> normal_values(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

}  // namespace

TEST_CASE("MSE loss is the mean of squared differences, and its gradient is 2 (y - t) / n times the scale", "[nn][loss]") {
  const std::vector<float> y = normal_values(3 * 5, 1), t = normal_values(3 * 5, 2);
  double sum = 0;
  for (std::size_t i = 0; i < y.size(); ++i) sum += (double(y[i]) - t[i]) * (double(y[i]) - t[i]);
  loom::nn::MseLoss loss;
  const float value = loss.forward(Tensor::from_vector(y, {3, 5}), Tensor::from_vector(t, {3, 5}));
  CHECK(value == Approx(sum / 15.0).epsilon(1e-6));
  const Tensor grad = loss.backward(128.0f);
  REQUIRE(grad.shape() == Shape{3, 5});
  REQUIRE(grad.dtype() == DType::f32);
  const std::vector<float> g = grad.to_vector<float>();
  for (std::size_t i = 0; i < y.size(); ++i) {
    CHECK(g[i] == Approx(128.0 * 2.0 * (double(y[i]) - t[i]) / 15.0).epsilon(1e-6));
  }
  CHECK_THROWS_WITH(loss.backward(1.0f), Catch::Contains("backward needs a forward first"));
}

TEST_CASE("MSE loss takes bf16 predictions and returns a bf16 gradient", "[nn][loss]") {
  const std::vector<float> y32 = normal_values(8, 3), t = normal_values(8, 4);
  const Tensor y = Tensor::empty({8}, DType::bf16);
  loom::kernels::cast(Tensor::from_vector(y32, {8}), y);
  const std::vector<float> yb = [&] {  // the bf16 values the loss sees
    const Tensor back = Tensor::empty({8}, DType::f32);
    loom::kernels::cast(y, back);
    return back.to_vector<float>();
  }();
  double sum = 0;
  for (std::size_t i = 0; i < 8; ++i) sum += (double(yb[i]) - t[i]) * (double(yb[i]) - t[i]);
  loom::nn::MseLoss loss;
  CHECK(loss.forward(y, Tensor::from_vector(t, {8})) == Approx(sum / 8.0).epsilon(1e-6));
  const Tensor grad = loss.backward(1.0f);
  REQUIRE(grad.dtype() == DType::bf16);
  const Tensor g32 = Tensor::empty({8}, DType::f32);
  loom::kernels::cast(grad, g32);
  const std::vector<float> g = g32.to_vector<float>();
  for (std::size_t i = 0; i < 8; ++i) CHECK(g[i] == Approx(2.0 * (double(yb[i]) - t[i]) / 8.0).epsilon(1e-2));
}

TEST_CASE("MSE loss names a target of the wrong shape or dtype", "[nn][loss]") {
  loom::nn::MseLoss loss;
  const Tensor y = Tensor::zeros({4, 2}, DType::f32);
  CHECK_THROWS_WITH(loss.forward(y, Tensor::zeros({4, 3}, DType::f32)), Catch::Contains("targets must be f32 of the predictions' shape"));
  CHECK_THROWS_WITH(loss.forward(y, Tensor::zeros({4, 2}, DType::i32)), Catch::Contains("targets must be f32"));
}

TEST_CASE("cross-entropy loss is the mean over counted rows of logsumexp - the target's logit", "[nn][loss]") {
  const std::int64_t rows = 4, classes = 5;
  const std::vector<float> logits = normal_values(rows * classes, 5);
  const std::vector<std::int32_t> targets{2, -1, 0, 4};  // row 1 is ignored
  std::vector<double> softmax(logits.size());
  double loss_sum = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    double m = -1e30, z = 0;
    for (std::int64_t c = 0; c < classes; ++c) m = std::max(m, double(logits[r * classes + c]));
    for (std::int64_t c = 0; c < classes; ++c) z += std::exp(double(logits[r * classes + c]) - m);
    for (std::int64_t c = 0; c < classes; ++c) softmax[r * classes + c] = std::exp(double(logits[r * classes + c]) - m) / z;
    if (targets[r] >= 0) loss_sum += m + std::log(z) - logits[r * classes + targets[r]];
  }
  loom::nn::CrossEntropyLoss loss;
  const float value = loss.forward(Tensor::from_vector(logits, {rows, classes}), Tensor::from_vector(targets, {rows}));
  CHECK(value == Approx(loss_sum / 3.0).epsilon(1e-6));
  CHECK(loss.counted_rows() == 3);
  const std::vector<float> g = loss.backward(2.0f).to_vector<float>();
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < classes; ++c) {
      const double expected = targets[r] < 0 ? 0.0 : 2.0 / 3.0 * (softmax[r * classes + c] - (c == targets[r] ? 1.0 : 0.0));
      CHECK(g[r * classes + c] == Approx(expected).margin(1e-6));
    }
  }
}

TEST_CASE("cross-entropy loss names the row whose target is not a class", "[nn][loss]") {
  loom::nn::CrossEntropyLoss loss;
  const Tensor logits = Tensor::zeros({3, 4}, DType::f32);
  const std::string message = loom::test::error_message(
      [&] { loss.forward(logits, Tensor::from_vector(std::vector<std::int32_t>{0, 4, 1}, {3})); });
  CHECK_THAT(message, Catch::Contains("the target of row 1 is 4, outside the classes [0, 4)"));
  CHECK_THROWS_WITH(loss.forward(logits, Tensor::zeros({3}, DType::f32)), Catch::Contains("targets must be [3] i32"));
}
