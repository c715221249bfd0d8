// Softmax and fused softmax + cross-entropy against fp64; backward passes against finite
// differences of the fp64 forward.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "loom/kernels/cross_entropy.hpp"
#include "loom/kernels/softmax.hpp"
#include "support/reference.hpp"
#include "support/tensor_checks.hpp"

using loom::DType;
using loom::ErrorCategory;
using loom::Tensor;
using loom::test::IsError;

namespace {

std::vector<double> softmax64(const std::vector<double>& x, std::size_t rows, std::size_t n) {
  std::vector<double> out(x.size());
  for (std::size_t r = 0; r < rows; ++r) {
    const double m = *std::max_element(x.begin() + static_cast<std::ptrdiff_t>(r * n),
                                       x.begin() + static_cast<std::ptrdiff_t>((r + 1) * n));
    double sum = 0;
    for (std::size_t j = 0; j < n; ++j) sum += std::exp(x[r * n + j] - m);
    for (std::size_t j = 0; j < n; ++j) out[r * n + j] = std::exp(x[r * n + j] - m) / sum;
  }
  return out;
}

// Cross-entropy of each row over the first `vocab` of `width` columns.
std::vector<double> cross_entropy64(const std::vector<double>& logits, const std::vector<std::int64_t>& targets,
                                    std::size_t width, std::size_t vocab, std::int64_t ignore) {
  std::vector<double> losses;
  for (std::size_t r = 0; r < targets.size(); ++r) {
    if (targets[r] == ignore) {
      losses.push_back(0);
      continue;
    }
    double m = -INFINITY, sum = 0;
    for (std::size_t j = 0; j < vocab; ++j) m = std::max(m, logits[r * width + j]);
    for (std::size_t j = 0; j < vocab; ++j) sum += std::exp(logits[r * width + j] - m);
    losses.push_back(m + std::log(sum) - logits[r * width + static_cast<std::size_t>(targets[r])]);
  }
  return losses;
}

}  // namespace

TEST_CASE("softmax forward and backward match fp64 and finite differences", "[kernels][softmax]") {
  std::mt19937 rng(31);
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    INFO(loom::dtype_name(dtype));
    const std::size_t rows = 6, n = 41;
    auto x = loom::test::random_tensor({2, 3, 41}, dtype, rng, 5.0);
    auto dy = loom::test::random_tensor({2, 3, 41}, dtype, rng);
    const Tensor y = Tensor::empty({2, 3, 41}, dtype), dx = Tensor::empty({2, 3, 41}, dtype);
    loom::test::poison(y);
    loom::test::poison(dx);
    loom::kernels::softmax_forward(x.tensor, y);
    const auto expected = softmax64(x.values, rows, n);
    loom::test::require_close(y, expected, loom::test::ulp_of(dtype), 1e-7);

    if (dtype != DType::f32) continue;  // the backward is checked in fp32 against fp64 derivatives
    loom::kernels::softmax_backward(y, dy.tensor, dx);
    std::vector<double> xs = x.values, dx_ref(xs.size());
    auto loss = [&] {
      const auto s = softmax64(xs, rows, n);
      double l = 0;
      for (std::size_t i = 0; i < s.size(); ++i) l += dy.values[i] * s[i];
      return l;
    };
    for (std::size_t i = 0; i < xs.size(); ++i) dx_ref[i] = loom::test::finite_difference(xs, i, loss);
    loom::test::require_close(dx, dx_ref, 1e-4, 1e-6);
  }
}

TEST_CASE("cross-entropy over a padded vocabulary, with ignored rows, forward and backward",
          "[kernels][cross_entropy]") {
  std::mt19937 rng(32);
  const std::size_t rows = 7, width = 40, vocab = 37;  // 3 padded columns never read
  for (DType dtype : {DType::f32, DType::bf16}) {
    INFO(loom::dtype_name(dtype));
    auto logits = loom::test::random_tensor({7, 40}, dtype, rng, 4.0);
    const std::vector<std::int64_t> targets = {0, 36, 5, -1, 17, 2, 36};
    auto dloss = loom::test::random_tensor({7}, DType::f32, rng);
    const Tensor target_tensor = Tensor::from_vector(targets, {7});
    const Tensor losses = Tensor::empty({7}, DType::f32);
    loom::test::poison(losses);
    loom::kernels::CrossEntropyOptions options;
    options.vocab_size = vocab;
    loom::kernels::cross_entropy_forward(logits.tensor, target_tensor, losses, options);
    loom::test::require_close(losses, cross_entropy64(logits.values, targets, width, vocab, -1), 1e-5, 1e-5);

    // Backward in place over the logits, as a training step does.
    const Tensor dlogits = logits.tensor.clone();
    loom::kernels::cross_entropy_backward(dlogits, target_tensor, dloss.tensor, dlogits, options);
    std::vector<double> xs = logits.values, grad(xs.size(), 0.0);
    auto loss = [&] {
      const auto l = cross_entropy64(xs, targets, width, vocab, -1);
      double total = 0;
      for (std::size_t r = 0; r < rows; ++r) total += dloss.values[r] * l[r];
      return total;
    };
    for (std::size_t i = 0; i < xs.size(); ++i) grad[i] = loom::test::finite_difference(xs, i, loss);
    loom::test::require_close(dlogits, grad, loom::test::ulp_of(dtype), 1e-6);
  }
}

TEST_CASE("cross-entropy names targets outside the vocabulary", "[kernels][cross_entropy]") {
  const Tensor logits = Tensor::zeros({2, 8}, DType::f32), losses = Tensor::zeros({2}, DType::f32);
  loom::kernels::CrossEntropyOptions options;
  options.vocab_size = 6;
  const Tensor targets = Tensor::from_vector(std::vector<std::int32_t>{1, 6}, {2});
  CHECK_THROWS_MATCHES(loom::kernels::cross_entropy_forward(logits, targets, losses, options), loom::Error,
                       IsError(ErrorCategory::invalid_argument, {"target 6", "row 1", "[0, 6)"}));
  options.vocab_size = 9;
  CHECK_THROWS_MATCHES(loom::kernels::cross_entropy_forward(logits, targets, losses, options), loom::Error,
                       IsError(ErrorCategory::invalid_argument, {"vocab_size 9", "[1, 8]"}));
  CHECK_THROWS_MATCHES(
      loom::kernels::cross_entropy_forward(logits, Tensor::zeros({2}, DType::f32), losses), loom::Error,
      IsError(ErrorCategory::invalid_argument, {"targets must be i32 or i64"}));
  // A uniform distribution over 8 classes: loss log(8) exactly computable.
  const Tensor uniform_losses = Tensor::empty({2}, DType::f32);
  loom::kernels::cross_entropy_forward(logits, Tensor::from_vector(std::vector<std::int32_t>{1, 7}, {2}), uniform_losses);
  CHECK(uniform_losses.to_vector<float>()[0] == Approx(std::log(8.0)).epsilon(1e-6));
}

TEST_CASE("accumulate_mean adds the fp64 mean rounded once, and names bad arguments", "[kernels][cross_entropy]") {
  std::mt19937 rng(31);
  std::uniform_real_distribution<float> dist(0.0f, 12.0f);
  std::vector<float> values(8191);
  for (float& v : values) v = dist(rng);
  double sum = 0;
  for (const float v : values) sum += v;
  const Tensor out = Tensor::from_vector(std::vector<float>{1.5f}, {1});
  loom::kernels::accumulate_mean(Tensor::from_vector(values, {8191}), 8000.0, out);
  REQUIRE(out.item<float>() == 1.5f + static_cast<float>(sum / 8000.0));
  CHECK_THROWS_MATCHES(loom::kernels::accumulate_mean(Tensor::from_vector(values, {8191}), 0.0, out), loom::Error,
                       loom::test::IsError(loom::ErrorCategory::invalid_argument, {"divisor"}));
  CHECK_THROWS_MATCHES(loom::kernels::accumulate_mean(Tensor::from_vector(values, {8191}), 1.0, Tensor::zeros({2}, DType::f32)),
                       loom::Error, loom::test::IsError(loom::ErrorCategory::invalid_argument, {"out"}));
}
