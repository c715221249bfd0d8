// LayerNorm forward against fp64; backward against finite differences of the fp64 forward.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "loom/kernels/elementwise.hpp"
#include "loom/kernels/layernorm.hpp"
#include "support/reference.hpp"
#include "support/tensor_checks.hpp"

using loom::DType;
using loom::Tensor;

namespace {

// out[r, c] of the fp64 LayerNorm.
std::vector<double> layernorm64(const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& b,
                                std::size_t rows, std::size_t channels, double eps, std::vector<double>* mean = nullptr,
                                std::vector<double>* rstd = nullptr) {
  std::vector<double> out(x.size());
  for (std::size_t r = 0; r < rows; ++r) {
    double m = 0, v = 0;
    for (std::size_t c = 0; c < channels; ++c) m += x[r * channels + c];
    m /= static_cast<double>(channels);
    for (std::size_t c = 0; c < channels; ++c) v += (x[r * channels + c] - m) * (x[r * channels + c] - m);
    const double s = 1 / std::sqrt(v / static_cast<double>(channels) + eps);
    for (std::size_t c = 0; c < channels; ++c) out[r * channels + c] = (x[r * channels + c] - m) * s * w[c] + b[c];
    if (mean) mean->push_back(m);
    if (rstd) rstd->push_back(s);
  }
  return out;
}

}  // namespace

TEST_CASE("layernorm forward matches fp64 in every dtype", "[kernels][layernorm]") {
  std::mt19937 rng(21);
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    INFO(loom::dtype_name(dtype));
    const std::int64_t rows = 2 * 9, channels = 77;
    auto x = loom::test::random_tensor({2, 9, channels}, dtype, rng, 3.0);
    auto w = loom::test::random_tensor({channels}, dtype, rng);
    auto b = loom::test::random_tensor({channels}, dtype, rng);
    const Tensor out = Tensor::empty({2, 9, channels}, dtype);
    const Tensor mean = Tensor::empty({rows}, DType::f32), rstd = Tensor::empty({rows}, DType::f32);
    for (const Tensor& t : {out, mean, rstd}) loom::test::poison(t);
    loom::kernels::layernorm_forward(x.tensor, w.tensor, b.tensor, out, mean, rstd, 1e-5f);
    std::vector<double> mean64, rstd64;
    const auto expected = layernorm64(x.values, w.values, b.values, rows, channels, 1e-5, &mean64, &rstd64);
    const double ulp = loom::test::ulp_of(dtype);
    loom::test::require_close(out, expected, ulp, 2e-5);
    loom::test::require_close(mean, mean64, 1e-5, 1e-6);
    loom::test::require_close(rstd, rstd64, 1e-5, 1e-6);
  }
}

TEST_CASE("layernorm backward matches finite differences and accumulates parameter gradients",
          "[kernels][layernorm]") {
  std::mt19937 rng(22);
  const std::size_t rows = 5, channels = 19;
  const double eps = 1e-5;
  auto x = loom::test::random_tensor({5, 19}, DType::f32, rng, 2.0);
  auto w = loom::test::random_tensor({19}, DType::f32, rng);
  auto b = loom::test::random_tensor({19}, DType::f32, rng);
  auto dout = loom::test::random_tensor({5, 19}, DType::f32, rng);
  const Tensor out = Tensor::empty({5, 19}, DType::f32);
  const Tensor mean = Tensor::empty({5}, DType::f32), rstd = Tensor::empty({5}, DType::f32);
  loom::kernels::layernorm_forward(x.tensor, w.tensor, b.tensor, out, mean, rstd, static_cast<float>(eps));

  const Tensor dx = Tensor::empty({5, 19}, DType::f32);
  loom::test::poison(dx);
  const Tensor dw = Tensor::full({19}, DType::f32, 0.5), db = Tensor::full({19}, DType::f32, -0.25);  // accumulated into
  loom::kernels::layernorm_backward(dout.tensor, x.tensor, w.tensor, mean, rstd, dx, dw, db);

  // L = sum(dout * layernorm(x, w, b)); its gradients by central differences in fp64.
  std::vector<double> xs = x.values, ws = w.values, bs = b.values;
  auto loss = [&] {
    const auto y = layernorm64(xs, ws, bs, rows, channels, eps);
    double l = 0;
    for (std::size_t i = 0; i < y.size(); ++i) l += dout.values[i] * y[i];
    return l;
  };
  std::vector<double> dx_ref(xs.size()), dw_ref(channels), db_ref(channels);
  for (std::size_t i = 0; i < xs.size(); ++i) dx_ref[i] = loom::test::finite_difference(xs, i, loss);
  for (std::size_t c = 0; c < channels; ++c) {
    dw_ref[c] = 0.5 + loom::test::finite_difference(ws, c, loss);
    db_ref[c] = -0.25 + loom::test::finite_difference(bs, c, loss);
  }
  loom::test::require_close(dx, dx_ref, 1e-4, 1e-5);
  loom::test::require_close(dw, dw_ref, 1e-4, 1e-5);
  loom::test::require_close(db, db_ref, 1e-4, 1e-5);
}

TEST_CASE("layernorm checks shapes and statistics dtypes", "[kernels][layernorm]") {
  const Tensor x = Tensor::zeros({3, 8}, DType::f32), w = Tensor::zeros({8}, DType::f32);
  const Tensor stats = Tensor::zeros({3}, DType::f32);
  CHECK_THROWS_MATCHES(loom::kernels::layernorm_forward(x, Tensor::zeros({7}, DType::f32), w, x, stats, stats),
                       loom::Error, loom::test::IsError(loom::ErrorCategory::invalid_argument, {"'weight'", "(8)"}));
  CHECK_THROWS_MATCHES(loom::kernels::layernorm_forward(x, w, w, x, Tensor::zeros({3}, DType::bf16), stats),
                       loom::Error, loom::test::IsError(loom::ErrorCategory::invalid_argument, {"'mean' must be f32"}));
  CHECK_THROWS_MATCHES(loom::kernels::layernorm_forward(x, w, w, x, stats, stats, 0.0f), loom::Error,
                       loom::test::IsError(loom::ErrorCategory::invalid_argument, {"eps"}));
  const Tensor dout = Tensor::zeros({3, 8}, DType::f32), grads = Tensor::zeros({8}, DType::f32);
  CHECK_THROWS_MATCHES(loom::kernels::layernorm_backward(dout, x, w, stats, stats, dout, grads, grads), loom::Error,
                       loom::test::IsError(loom::ErrorCategory::invalid_argument, {"dx must not share storage"}));
  CHECK_THROWS_MATCHES(loom::kernels::layernorm_backward(dout, x, w, stats, stats, Tensor::zeros({3, 8}, DType::f32),
                                                         grads, Tensor::zeros({8}, DType::bf16)),
                       loom::Error, loom::test::IsError(loom::ErrorCategory::invalid_argument, {"'dbias' is bf16"}));
}

TEST_CASE("residual_layernorm_forward is residual_add then layernorm_forward, bit for bit", "[kernels][layernorm]") {
  std::mt19937 rng(58);
  for (DType dtype : {DType::f32, DType::bf16}) {
    const auto a = loom::test::random_tensor({5, 96}, dtype, rng), b = loom::test::random_tensor({5, 96}, dtype, rng);
    const auto w = loom::test::random_tensor({96}, dtype, rng), bias = loom::test::random_tensor({96}, dtype, rng);
    const Tensor sum = Tensor::empty({5, 96}, dtype), out = Tensor::empty({5, 96}, dtype);
    const Tensor mean = Tensor::empty({5}, DType::f32), rstd = Tensor::empty({5}, DType::f32);
    loom::kernels::residual_layernorm_forward(a.tensor, b.tensor, sum, w.tensor, bias.tensor, out, mean, rstd);
    const Tensor sum2 = Tensor::empty({5, 96}, dtype), out2 = Tensor::empty({5, 96}, dtype);
    const Tensor mean2 = Tensor::empty({5}, DType::f32), rstd2 = Tensor::empty({5}, DType::f32);
    loom::kernels::residual_add(a.tensor, b.tensor, sum2);
    loom::kernels::layernorm_forward(sum2, w.tensor, bias.tensor, out2, mean2, rstd2);
    CHECK(loom::test::as_doubles(sum) == loom::test::as_doubles(sum2));
    CHECK(loom::test::as_doubles(out) == loom::test::as_doubles(out2));
    CHECK(mean.to_vector<float>() == mean2.to_vector<float>());
    CHECK(rstd.to_vector<float>() == rstd2.to_vector<float>());
  }
  const Tensor a = Tensor::zeros({2, 8}, DType::f32), w = Tensor::zeros({8}, DType::f32);
  const Tensor stat = Tensor::empty({2}, DType::f32), out = Tensor::empty({2, 8}, DType::f32);
  CHECK_THROWS_MATCHES(loom::kernels::residual_layernorm_forward(a, a, a, w, w, out, stat, stat), loom::Error,
                       loom::test::IsError(loom::ErrorCategory::invalid_argument, {"sum must not share storage"}));
}

TEST_CASE("layernorm_backward_residual is layernorm_backward then residual_add, bit for bit", "[kernels][layernorm]") {
  std::mt19937 rng(59);
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    INFO(dtype);
    // 400 x 100: more elements than the CPU kernels' threading threshold (32 Ki), so the rows are split
    // over the threads where there are several; 100 channels end in a partial 16-lane block.
    const auto x = loom::test::random_tensor({400, 100}, dtype, rng), dout = loom::test::random_tensor({400, 100}, dtype, rng);
    const auto residual = loom::test::random_tensor({400, 100}, dtype, rng);
    const auto w = loom::test::random_tensor({100}, dtype, rng), bias = loom::test::random_tensor({100}, dtype, rng);
    const Tensor out = Tensor::empty({400, 100}, dtype);
    const Tensor mean = Tensor::empty({400}, DType::f32), rstd = Tensor::empty({400}, DType::f32);
    loom::kernels::layernorm_forward(x.tensor, w.tensor, bias.tensor, out, mean, rstd);
    const Tensor dx = Tensor::empty({400, 100}, dtype), dw = Tensor::zeros({100}, DType::f32), db = Tensor::zeros({100}, DType::f32);
    loom::kernels::layernorm_backward_residual(dout.tensor, x.tensor, w.tensor, mean, rstd, residual.tensor, dx, dw, db);
    const Tensor dx2 = Tensor::empty({400, 100}, dtype), sum2 = Tensor::empty({400, 100}, dtype);
    const Tensor dw2 = Tensor::zeros({100}, DType::f32), db2 = Tensor::zeros({100}, DType::f32);
    loom::kernels::layernorm_backward(dout.tensor, x.tensor, w.tensor, mean, rstd, dx2, dw2, db2);
    loom::kernels::residual_add(residual.tensor, dx2, sum2);
    CHECK(loom::test::as_doubles(dx) == loom::test::as_doubles(sum2));
    CHECK(dw.to_vector<float>() == dw2.to_vector<float>());
    CHECK(db.to_vector<float>() == db2.to_vector<float>());
    // The residual really is added: against the plain gradient, every element differs by it.
    const auto plain = loom::test::as_doubles(dx2), fused = loom::test::as_doubles(dx), r = loom::test::as_doubles(residual.tensor);
    for (std::size_t i = 0; i < plain.size(); ++i) REQUIRE(fused[i] == Approx(plain[i] + r[i]).margin(0.02).epsilon(0.02));
  }
  const Tensor x = Tensor::zeros({2, 8}, DType::f32), w = Tensor::zeros({8}, DType::f32);
  const Tensor stat = Tensor::zeros({2}, DType::f32), g = Tensor::zeros({8}, DType::f32);
  const Tensor dout = Tensor::zeros({2, 8}, DType::f32), dx = Tensor::empty({2, 8}, DType::f32);
  CHECK_THROWS_MATCHES(loom::kernels::layernorm_backward_residual(dout, x, w, stat, stat, dx, dx, g, g), loom::Error,
                       loom::test::IsError(loom::ErrorCategory::invalid_argument, {"residual must not share storage with dx"}));
  const Tensor wide = Tensor::zeros({8}, DType::f32), dw = Tensor::zeros({8}, DType::f32);
  const Tensor x1 = Tensor::zeros({8}, DType::f32), d1 = Tensor::zeros({8}, DType::f32), dx1 = Tensor::empty({8}, DType::f32);
  const Tensor stat1 = Tensor::zeros({1}, DType::f32);
  CHECK_THROWS_MATCHES(loom::kernels::layernorm_backward_residual(d1, x1, wide, stat1, stat1, dw, dx1, dw, g), loom::Error,
                       loom::test::IsError(loom::ErrorCategory::invalid_argument, {"dweight or dbias"}));
  CHECK_THROWS_MATCHES(
      loom::kernels::layernorm_backward_residual(dout, x, w, stat, stat, Tensor::zeros({2, 4}, DType::f32), dx, g, g),
      loom::Error, loom::test::IsError(loom::ErrorCategory::invalid_argument, {"residual"}));
  CHECK_THROWS_MATCHES(
      loom::kernels::layernorm_backward_residual(dout, x, w, stat, stat, Tensor::zeros({2, 8}, DType::bf16), dx, g, g),
      loom::Error, loom::test::IsError(loom::ErrorCategory::invalid_argument, {"residual"}));
  CHECK_THROWS_MATCHES(loom::kernels::layernorm_backward_residual(dout, x, w, stat, stat, Tensor(), dx, g, g), loom::Error,
                       loom::test::IsError(loom::ErrorCategory::invalid_argument, {"'residual' is undefined"}));
}
