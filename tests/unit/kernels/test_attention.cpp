// Causal multi-head attention against a direct fp64 implementation; its backward against finite
// differences of that fp64 forward.
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <random>
#include <vector>

#include "loom/kernels/attention.hpp"
#include "loom/kernels/softmax.hpp"
#include "support/attention_reference.hpp"
#include "support/reference.hpp"
#include "support/tensor_checks.hpp"

using loom::DType;
using loom::Tensor;
using loom::kernels::AttentionOptions;
using loom::kernels::GemmPrecision;

using loom::test::attention64;

TEST_CASE("causal attention forward matches fp64 in fp32, tf32 and bf16", "[kernels][attention]") {
  std::mt19937 rng(61);
  const std::int64_t batch = 2, steps = 13, channels = 24, heads = 3;
  for (auto [precision, dtype, tolerance] : std::vector<std::tuple<GemmPrecision, DType, double>>{
           {GemmPrecision::fp32, DType::f32, 1e-5}, {GemmPrecision::tf32, DType::f32, 3e-3},
           {GemmPrecision::bf16, DType::bf16, 3e-2}}) {
    INFO(loom::kernels::to_string(precision));
    auto qkv = loom::test::random_tensor({batch, steps, 3 * channels}, dtype, rng, 2.0);
    const Tensor out = Tensor::empty({batch, steps, channels}, dtype);
    const Tensor att = Tensor::empty({batch, heads, steps, steps}, dtype);
    loom::test::poison(out);
    loom::test::poison(att);
    loom::kernels::attention_forward(qkv.tensor, out, att, AttentionOptions{heads, precision});
    loom::test::require_close(out, attention64(qkv.values, batch, steps, channels, heads), tolerance, tolerance);
    // Each row of att is a distribution over the visible steps, zero beyond them.
    const auto probs = loom::test::as_doubles(att);
    for (std::int64_t row = 0; row < batch * heads * steps; ++row) {
      const std::int64_t t = row % steps;
      double sum = 0;
      for (std::int64_t u = 0; u < steps; ++u) {
        const double p = probs[static_cast<std::size_t>(row * steps + u)];
        if (u > t) REQUIRE(p == 0.0);
        sum += p;
      }
      REQUIRE(std::fabs(sum - 1.0) < 10 * tolerance);
    }
  }
}

TEST_CASE("causal attention backward matches finite differences of the fp64 forward", "[kernels][attention]") {
  std::mt19937 rng(62);
  const std::size_t batch = 2, steps = 5, channels = 8, heads = 2;
  auto qkv = loom::test::random_tensor({2, 5, 24}, DType::f32, rng, 1.5);
  auto dout = loom::test::random_tensor({2, 5, 8}, DType::f32, rng);
  const Tensor out = Tensor::empty({2, 5, 8}, DType::f32), att = Tensor::empty({2, 2, 5, 5}, DType::f32);
  const AttentionOptions options{static_cast<std::int64_t>(heads), GemmPrecision::fp32};
  loom::kernels::attention_forward(qkv.tensor, out, att, options);
  const Tensor dqkv = Tensor::empty({2, 5, 24}, DType::f32);
  loom::test::poison(dqkv);
  loom::kernels::attention_backward(dout.tensor, qkv.tensor, att, dqkv, options);

  std::vector<double> x = qkv.values, grad(x.size());
  auto loss = [&] {
    const auto y = attention64(x, batch, steps, channels, heads);
    double l = 0;
    for (std::size_t i = 0; i < y.size(); ++i) l += dout.values[i] * y[i];
    return l;
  };
  for (std::size_t i = 0; i < x.size(); ++i) grad[i] = loom::test::finite_difference(x, i, loss);
  loom::test::require_close(dqkv, grad, 1e-4, 1e-5);
}

TEST_CASE("the CPU causal attention path computes the composed path's values", "[kernels][attention]") {
  // Sequences that cross every micro-tile (6, 14 rows; 16, 32 columns) raggedly, and one longer than
  // a GEMM pass (kc = 384); head sizes that are not multiples of 16.
  std::mt19937 rng(63);
  for (auto [batch, steps, channels, heads] : std::vector<std::array<std::int64_t, 4>>{{3, 130, 48, 2}, {1, 400, 24, 3}}) {
    INFO("T = " << steps << ", C = " << channels << ", heads = " << heads);
    auto qkv = loom::test::random_tensor({batch, steps, 3 * channels}, DType::f32, rng, 2.0);
    auto dout = loom::test::random_tensor({batch, steps, channels}, DType::f32, rng);
    AttentionOptions causal{heads, GemmPrecision::fp32}, composed = causal;
    composed.path = loom::kernels::AttentionPath::composed;
    auto run = [&](const AttentionOptions& options) {
      const Tensor out = Tensor::empty({batch, steps, channels}, DType::f32);
      const Tensor att = Tensor::empty({batch, heads, steps, steps}, DType::f32);
      const Tensor dqkv = Tensor::empty({batch, steps, 3 * channels}, DType::f32);
      for (const Tensor& t : {out, att, dqkv}) loom::test::poison(t);
      loom::kernels::attention_forward(qkv.tensor, out, att, options);
      loom::kernels::attention_backward(dout.tensor, qkv.tensor, att, dqkv, options);
      return std::array<std::vector<float>, 3>{out.to_vector<float>(), att.to_vector<float>(), dqkv.to_vector<float>()};
    };
    const auto got = run(causal), expected = run(composed);
    for (std::size_t i = 0; i < got.size(); ++i) {
      INFO("output " << i << " (out, att, dqkv)");
      REQUIRE(got[i] == expected[i]);  // equal values (a zero's sign may differ where terms were skipped)
    }
    loom::test::require_close(Tensor::from_vector(got[0], {batch, steps, channels}),
                              attention64(qkv.values, static_cast<std::size_t>(batch), static_cast<std::size_t>(steps),
                                          static_cast<std::size_t>(channels), static_cast<std::size_t>(heads)),
                              1e-5, 1e-5);
  }
}

TEST_CASE("the head-major attention path computes the composed path's bits", "[kernels][attention]") {
  // Every GEMM batched over B * NH heads on copies of the heads must give exactly what the
  // per-sequence GEMMs on strided views give, in every precision (each element is the same sum in
  // the same order); and against fp64 as a check that both are right.
  std::mt19937 rng(64);
  const std::int64_t batch = 3, steps = 37, channels = 40, heads = 5;  // hs = 8: 16-byte rows in bf16
  for (auto [precision, dtype] : std::vector<std::pair<GemmPrecision, DType>>{
           {GemmPrecision::fp32, DType::f32}, {GemmPrecision::tf32, DType::f32}, {GemmPrecision::bf16, DType::bf16},
           {GemmPrecision::fp16, DType::f16}}) {
    INFO(loom::kernels::to_string(precision));
    auto qkv = loom::test::random_tensor({batch, steps, 3 * channels}, dtype, rng, 2.0);
    auto dout = loom::test::random_tensor({batch, steps, channels}, dtype, rng);
    AttentionOptions composed{heads, precision}, head_major = composed;
    composed.path = loom::kernels::AttentionPath::composed;
    head_major.path = loom::kernels::AttentionPath::head_major;
    auto run = [&](const AttentionOptions& options) {
      const Tensor out = Tensor::empty({batch, steps, channels}, dtype);
      const Tensor att = Tensor::empty({batch, heads, steps, steps}, dtype);
      const Tensor dqkv = Tensor::empty({batch, steps, 3 * channels}, dtype);
      for (const Tensor& t : {out, att, dqkv}) loom::test::poison(t);
      loom::kernels::attention_forward(qkv.tensor, out, att, options);
      loom::kernels::attention_backward(dout.tensor, qkv.tensor, att, dqkv, options);
      return std::array<Tensor, 3>{out, att, dqkv};
    };
    const auto got = run(head_major), expected = run(composed);
    for (std::size_t i = 0; i < got.size(); ++i) {
      INFO("output " << i << " (out, att, dqkv)");
      REQUIRE(loom::test::as_doubles(got[i]) == loom::test::as_doubles(expected[i]));
    }
    const double tolerance = dtype == DType::f32 ? 3e-3 : 3e-2;
    loom::test::require_close(got[0], attention64(qkv.values, batch, steps, channels, heads), tolerance, tolerance);
  }
}

TEST_CASE("attention forward without an output computes the probabilities' bits alone", "[kernels][attention]") {
  // Selective activation checkpointing recomputes only the probabilities; they must be the bits
  // the full forward made, on every path (automatic: the CPU's own kernel in fp32).
  std::mt19937 rng(65);
  const std::int64_t batch = 2, steps = 19, channels = 24, heads = 3;
  for (auto [precision, dtype] : std::vector<std::pair<GemmPrecision, DType>>{
           {GemmPrecision::fp32, DType::f32}, {GemmPrecision::bf16, DType::bf16}}) {
    for (const auto path : {loom::kernels::AttentionPath::automatic, loom::kernels::AttentionPath::composed,
                            loom::kernels::AttentionPath::head_major}) {
      INFO(loom::kernels::to_string(precision) << ", path " << static_cast<int>(path));
      auto qkv = loom::test::random_tensor({batch, steps, 3 * channels}, dtype, rng, 2.0);
      AttentionOptions options{heads, precision};
      options.path = path;
      const Tensor out = Tensor::empty({batch, steps, channels}, dtype);
      const Tensor full = Tensor::empty({batch, heads, steps, steps}, dtype), alone = Tensor::empty(full.shape(), dtype);
      for (const Tensor& t : {out, full, alone}) loom::test::poison(t);
      loom::kernels::attention_forward(qkv.tensor, out, full, options);
      loom::kernels::attention_forward(qkv.tensor, Tensor(), alone, options);
      REQUIRE(loom::test::as_doubles(alone) == loom::test::as_doubles(full));
    }
  }
}

TEST_CASE("split_heads and merge_heads move each element to its head-major place and back", "[kernels][attention]") {
  // Element values encode their [b, t, column] position, so every destination is checked exactly.
  const std::int64_t batch = 2, steps = 3, groups = 3, heads = 2, head_size = 5, width = groups * heads * head_size;
  for (DType dtype : {DType::f32, DType::bf16}) {
    INFO(dtype);
    std::vector<double> values(static_cast<std::size_t>(batch * steps * width));
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>(i);  // exact in bf16 up to 256
    const Tensor x = loom::test::from_doubles(values, {batch, steps, width}, dtype).tensor;
    const Tensor split = Tensor::empty({groups, batch, heads, steps, head_size}, dtype);
    loom::test::poison(split);
    loom::kernels::split_heads(x, split, heads);
    const auto got = loom::test::as_doubles(split);
    std::size_t i = 0;
    for (std::int64_t k = 0; k < groups; ++k)
      for (std::int64_t b = 0; b < batch; ++b)
        for (std::int64_t h = 0; h < heads; ++h)
          for (std::int64_t t = 0; t < steps; ++t)
            for (std::int64_t c = 0; c < head_size; ++c, ++i) {
              const std::int64_t column = (k * heads + h) * head_size + c;
              REQUIRE(got[i] == static_cast<double>((b * steps + t) * width + column));
            }
    const Tensor back = Tensor::empty({batch, steps, width}, dtype);
    loom::test::poison(back);
    loom::kernels::merge_heads(split, back, heads);
    REQUIRE(loom::test::as_doubles(back) == loom::test::as_doubles(x));
  }
  const Tensor x = Tensor::zeros({2, 3, 30}, DType::f32);
  CHECK_THROWS_MATCHES(loom::kernels::split_heads(x, Tensor::zeros({3, 2, 2, 3, 4}, DType::f32), 2), loom::Error,
                       loom::test::IsError(loom::ErrorCategory::invalid_argument, {"split_heads", "x"}));
  CHECK_THROWS_MATCHES(loom::kernels::merge_heads(Tensor::zeros({3, 2, 2, 3, 5}, DType::f32), x, 3), loom::Error,
                       loom::test::IsError(loom::ErrorCategory::invalid_argument, {"merge_heads", "[K, B, 3, T, hs]"}));
  CHECK_THROWS_MATCHES(loom::kernels::split_heads(x, Tensor::zeros({3, 2, 2, 3, 5}, DType::bf16), 2), loom::Error,
                       loom::test::IsError(loom::ErrorCategory::invalid_argument, {"split_heads"}));
}

TEST_CASE("attention rejects heads that do not divide the channels and mismatched precision", "[kernels][attention]") {
  const Tensor qkv = Tensor::zeros({1, 4, 30}, DType::f32);
  const Tensor out = Tensor::zeros({1, 4, 10}, DType::f32), att = Tensor::zeros({1, 3, 4, 4}, DType::f32);
  CHECK_THROWS_MATCHES(loom::kernels::attention_forward(qkv, out, att, AttentionOptions{3, GemmPrecision::fp32}),
                       loom::Error, loom::test::IsError(loom::ErrorCategory::invalid_argument, {"10 channels", "3 heads"}));
  CHECK_THROWS_MATCHES(loom::kernels::attention_forward(qkv, out, att, AttentionOptions{2, GemmPrecision::bf16}),
                       loom::Error, loom::test::IsError(loom::ErrorCategory::invalid_argument, {"precision bf16"}));
}

TEST_CASE("causal softmax masks the future and normalizes the past", "[kernels][softmax]") {
  const Tensor x = Tensor::zeros({2, 3, 3}, DType::f32);
  loom::kernels::softmax_forward(x, x, {}, true);
  const std::vector<float> row_major = x.to_vector<float>();
  const std::vector<float> expected = {1, 0, 0, 0.5f, 0.5f, 0, 1 / 3.0f, 1 / 3.0f, 1 / 3.0f};
  for (std::size_t i = 0; i < row_major.size(); ++i) CHECK(row_major[i] == Approx(expected[i % 9]));
  CHECK_THROWS_AS(loom::kernels::softmax_forward(Tensor::zeros({3, 4}, DType::f32), Tensor::zeros({3, 4}, DType::f32), {}, true),
                  loom::Error);
}
