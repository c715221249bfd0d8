// The fused (FlashAttention-style) CPU attention against the fp64 reference, finite differences,
// the stored path, and itself under another thread count; and its working memory, which must grow
// linearly in T where the stored path's grows as T^2.
#include <catch2/catch.hpp>

#include <omp.h>

#include <array>
#include <cmath>
#include <random>
#include <vector>

#include "loom/core/allocator.hpp"
#include "loom/kernels/attention.hpp"
#include "support/attention_reference.hpp"
#include "support/reference.hpp"
#include "support/tensor_checks.hpp"

using loom::DType;
using loom::Tensor;
using loom::kernels::AttentionOptions;
using loom::kernels::GemmPrecision;

namespace {

struct Fused {
  Tensor out, lse, dqkv;
};

// Fused forward and (when dout is defined) backward into fresh, poisoned outputs.
Fused run_fused(const Tensor& qkv, const Tensor& dout, std::int64_t heads, GemmPrecision precision) {
  const std::int64_t batch = qkv.size(0), steps = qkv.size(1), channels = qkv.size(2) / 3;
  const AttentionOptions options{heads, precision};
  Fused f{Tensor::empty({batch, steps, channels}, qkv.dtype()), Tensor::empty({batch, heads, steps}, DType::f32),
          Tensor::empty(qkv.shape(), qkv.dtype())};
  for (const Tensor& t : {f.out, f.lse, f.dqkv}) loom::test::poison(t);
  loom::kernels::fused_attention_forward(qkv, f.out, f.lse, options);
  if (dout.defined()) loom::kernels::fused_attention_backward(dout, qkv, f.out, f.lse, f.dqkv, options);
  return f;
}

}  // namespace

TEST_CASE("fused attention forward and log-sum-exp match fp64 in f32, bf16 and f16", "[kernels][attention][fused]") {
  std::mt19937 rng(64);
  const std::size_t batch = 2, steps = 37, channels = 24, heads = 3;
  for (auto [precision, dtype, tolerance] : std::vector<std::tuple<GemmPrecision, DType, double>>{
           {GemmPrecision::fp32, DType::f32, 1e-5}, {GemmPrecision::bf16, DType::bf16, 1e-2},
           {GemmPrecision::fp16, DType::f16, 2e-3}}) {
    INFO(loom::kernels::to_string(precision));
    const auto qkv = loom::test::random_tensor({2, 37, 72}, dtype, rng, 2.0);
    const Fused f = run_fused(qkv.tensor, {}, heads, precision);
    // The reference sees the same rounded inputs; only the output's rounding separates them.
    loom::test::require_close(f.out, loom::test::attention64(qkv.values, batch, steps, channels, heads), tolerance,
                              tolerance);
    loom::test::require_close(f.lse, loom::test::attention_lse64(qkv.values, batch, steps, channels, heads), 1e-5,
                              1e-5);
  }
}

TEST_CASE("fused attention backward matches finite differences of the fp64 forward", "[kernels][attention][fused]") {
  std::mt19937 rng(65);
  const std::size_t batch = 2, steps = 6, channels = 8, heads = 2;
  auto qkv = loom::test::random_tensor({2, 6, 24}, DType::f32, rng, 1.5);
  auto dout = loom::test::random_tensor({2, 6, 8}, DType::f32, rng);
  const Fused f = run_fused(qkv.tensor, dout.tensor, heads, GemmPrecision::fp32);
  std::vector<double> x = qkv.values, grad(x.size());
  auto loss = [&] {
    const auto y = loom::test::attention64(x, batch, steps, channels, heads);
    double l = 0;
    for (std::size_t i = 0; i < y.size(); ++i) l += dout.values[i] * y[i];
    return l;
  };
  for (std::size_t i = 0; i < x.size(); ++i) grad[i] = loom::test::finite_difference(x, i, loss);
  loom::test::require_close(f.dqkv, grad, 1e-4, 1e-5);
}

TEST_CASE("fused attention agrees with the stored path and is deterministic across thread counts",
          "[kernels][attention][fused]") {
  std::mt19937 rng(66);
  const std::int64_t batch = 3, steps = 130, channels = 48, heads = 2;
  const auto qkv = loom::test::random_tensor({batch, steps, 3 * channels}, DType::f32, rng, 2.0);
  const auto dout = loom::test::random_tensor({batch, steps, channels}, DType::f32, rng);
  const AttentionOptions options{heads, GemmPrecision::fp32};
  const Tensor out = Tensor::empty({batch, steps, channels}, DType::f32);
  const Tensor att = Tensor::empty({batch, heads, steps, steps}, DType::f32);
  const Tensor dqkv = Tensor::empty(qkv.tensor.shape(), DType::f32);
  loom::kernels::attention_forward(qkv.tensor, out, att, options);
  loom::kernels::attention_backward(dout.tensor, qkv.tensor, att, dqkv, options);

  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const Fused one = run_fused(qkv.tensor, dout.tensor, heads, GemmPrecision::fp32);
  omp_set_num_threads(std::max(2, threads));
  const Fused many = run_fused(qkv.tensor, dout.tensor, heads, GemmPrecision::fp32);
  omp_set_num_threads(threads);
  loom::test::require_close(one.out, loom::test::as_doubles(out), 1e-5, 1e-6);
  loom::test::require_close(one.dqkv, loom::test::as_doubles(dqkv), 1e-4, 1e-5);
  REQUIRE(one.out.to_vector<float>() == many.out.to_vector<float>());
  REQUIRE(one.lse.to_vector<float>() == many.lse.to_vector<float>());
  REQUIRE(one.dqkv.to_vector<float>() == many.dqkv.to_vector<float>());
}

TEST_CASE("fused attention's working memory grows linearly in T", "[kernels][attention][fused][memory]") {
  std::mt19937 rng(67);
  const std::int64_t batch = 2, channels = 64, heads = 4;
  // The CPU allocator's peak above what is live before the call: the kernel's own workspace.
  auto workspace_bytes = [&](std::int64_t steps) {
    const auto qkv = loom::test::random_tensor({batch, steps, 3 * channels}, DType::f32, rng);
    const auto dout = loom::test::random_tensor({batch, steps, channels}, DType::f32, rng);
    const AttentionOptions options{heads, GemmPrecision::fp32};
    const Tensor out = Tensor::empty({batch, steps, channels}, DType::f32);
    const Tensor lse = Tensor::empty({batch, heads, steps}, DType::f32), dqkv = Tensor::empty(qkv.tensor.shape(), DType::f32);
    loom::reset_cpu_memory_peak();
    const std::int64_t live = loom::cpu_memory_stats().live_bytes;
    loom::kernels::fused_attention_forward(qkv.tensor, out, lse, options);
    loom::kernels::fused_attention_backward(dout.tensor, qkv.tensor, out, lse, dqkv, options);
    return loom::cpu_memory_stats().peak_bytes - live;
  };
  const std::int64_t small = workspace_bytes(128), large = workspace_bytes(512);
  INFO("workspace at T = 128: " << small << " bytes, at T = 512: " << large << " bytes");
  REQUIRE(small > 0);
  // 4x the steps: linear growth is 4x; the probabilities alone would be 16x.
  REQUIRE(large <= 4 * small + 4096);
  // And far below the stored path's probabilities at T = 512 ([B, NH, T, T] f32).
  REQUIRE(8 * large < batch * heads * 512 * 512 * 4);
}

TEST_CASE("fused attention names wrong lse shapes, dtypes and aliasing", "[kernels][attention][fused]") {
  const Tensor qkv = Tensor::zeros({1, 4, 24}, DType::f32), out = Tensor::empty({1, 4, 8}, DType::f32);
  const AttentionOptions options{2, GemmPrecision::fp32};
  CHECK_THROWS_MATCHES(loom::kernels::fused_attention_forward(qkv, out, Tensor::empty({1, 2, 5}, DType::f32), options),
                       loom::Error, loom::test::IsError(loom::ErrorCategory::invalid_argument, {"lse"}));
  CHECK_THROWS_MATCHES(loom::kernels::fused_attention_forward(qkv, out, Tensor::empty({1, 2, 4}, DType::bf16), options),
                       loom::Error, loom::test::IsError(loom::ErrorCategory::invalid_argument, {"lse", "f32"}));
  const Tensor lse = Tensor::empty({1, 2, 4}, DType::f32);
  loom::kernels::fused_attention_forward(qkv, out, lse, options);
  CHECK_THROWS_MATCHES(loom::kernels::fused_attention_backward(out, qkv, out, lse, qkv, options), loom::Error,
                       loom::test::IsError(loom::ErrorCategory::invalid_argument, {"dqkv", "share"}));
}
