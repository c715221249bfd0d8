// Causal self-attention on the CPU for f32 activations in fp32 precision: per (sequence, head), the
// GEMM engine computes only what the causal mask leaves (SgemmCausal), the softmax runs over each
// row's visible columns, and the pairs are spread over threads one each, so results do not depend
// on the thread count. It performs the composed path's operations (src/kernels/attention.cpp) on
// the same values in the same order, minus the terms the mask makes zero.
#include <cmath>
#include <vector>

#include "kernels/cpu/dispatch.hpp"
#include "kernels/cpu/region_failure.hpp"
#include "kernels/cpu/sgemm.hpp"
#include "kernels/cpu/training.hpp"

namespace loom::kernels::cpu {

namespace {

struct Layout {
  std::int64_t batch, steps, channels, heads, head_size;
  float scale;  // 1 / sqrt(head_size)

  Layout(const Tensor& qkv, std::int64_t num_heads)
      : batch(qkv.size(0)), steps(qkv.size(1)), channels(qkv.size(2) / 3), heads(num_heads),
        head_size(channels / num_heads),
        scale(static_cast<float>(1.0 / std::sqrt(static_cast<double>(channels / num_heads)))) {}
  // Head h of sequence b in a [B, T, width] activation, `offset` columns in: rows of head_size.
  std::int64_t at(std::int64_t b, std::int64_t h, std::int64_t width, std::int64_t offset) const {
    return b * steps * width + offset + h * head_size;
  }
  std::int64_t scores(std::int64_t b, std::int64_t h) const { return (b * heads + h) * steps * steps; }
};

// The engine's blocking for one head's products: the A-sliver order where this CPU's blocking already
// runs wide GEMMs in it (wide_n: an L2 that holds the A-sliver order's panel), whatever the width.
// The A-sliver order plans each A sliver once where the B-sliver order plans it again for every B
// sliver, and one of a head's product dimensions is its head size, so the panel stays small up to
// wide_n columns (past them for_columns takes the wide form as for any GEMM). AVX2's six products
// on the Xeon took 0.947x the time at T 128 (heads of 32), 0.976x at T 256 and 512 (heads of 64);
// the same bits. CPUs without wide_n (smaller L2s) keep their order: the other one was not measured.
// A head's A is read in place even where the CPU's blocking packs A (AVX2's): a head's products are
// small (T rows by a head of 32 or T deep), and packing each one cost more than it saved. With the
// other GEMMs packed, AVX2's width-128 step on the Xeon took 0.975x the time of the in-place engine
// before at 1 thread (two runs, 7 of 8 and 10 of 10 pairs) with the heads in place, and 0.993x and
// 0.995x with them packed; at 2 threads 0.967x against 0.993x; with Zen 3's blocking 0.931x against
// 0.937x (benchmarks/results/cpu-gemm-packed-a-xeon-m167-2c-2026-12-07/step_summary_heads.txt).
// Heads wider than wide_n keep panels of wide_n (the wide form's wider panel pays off for a packed A,
// which the heads' is not; not measured for heads).
SgemmBlocking head_blocking(const CpuKernels& kernels) {
  SgemmBlocking blocking = sgemm_blocking(kernels);
  if (blocking.wide_n > 0) blocking.l1 = SgemmL1::a_sliver;
  blocking.a_in_place = true;
  blocking.wide_nc = blocking.wide_n;
  return blocking;
}

// C = A B for one head (SgemmCausal as the product allows), on the calling thread.
void head_sgemm(const SgemmBlocking& blocking, const CpuKernels& kernels, std::int64_t m, std::int64_t n,
                std::int64_t k, SgemmOperand a, SgemmOperand b, float* c, std::int64_t ldc, SgemmCausal causal) {
  sgemm_blocked(blocking.for_columns(n), m, n, k, a, b, c, ldc, 1, kernels, false, causal);
}

SgemmOperand rows(const float* data, std::int64_t ld) { return {data, ld, 1}; }
SgemmOperand transposed(const float* data, std::int64_t ld) { return {data, 1, ld}; }

// x[t, 0 .. cols) *= factor for t < rows of x (leading dimension ld).
void scale_rows(float* x, std::int64_t rows_count, std::int64_t cols, std::int64_t ld, float factor) {
  for (std::int64_t t = 0; t < rows_count; ++t) {
    for (std::int64_t j = 0; j < cols; ++j) x[t * ld + j] *= factor;
  }
}

// body(b, h) for every (sequence, head), spread over threads; the first failure is rethrown after
// the loop (no exception may leave an OpenMP region).
template <class Body>
void for_each_head(const Layout& d, Body&& body) {
  const std::int64_t pairs = d.batch * d.heads;
  RegionFailure failure;
#pragma omp parallel for schedule(static) if (pairs > 1 && d.steps * d.steps * d.head_size * pairs > (1 << 18))
  for (std::int64_t pair = 0; pair < pairs; ++pair) {
    failure.capture([&] { body(pair / d.heads, pair % d.heads); });
  }
  failure.rethrow();
}

}  // namespace

void attention_forward(const Tensor& qkv, const Tensor& out, const Tensor& att, std::int64_t heads) {
  const Layout d(qkv, heads);
  const CpuKernels& k = cpu_kernels();
  const SgemmBlocking blocking = head_blocking(k);
  const std::int64_t width = 3 * d.channels, T = d.steps;
  for_each_head(d, [&](std::int64_t b, std::int64_t h) {
    const float* q = qkv.data<float>() + d.at(b, h, width, 0);
    const float* key = qkv.data<float>() + d.at(b, h, width, d.channels);
    const float* v = qkv.data<float>() + d.at(b, h, width, 2 * d.channels);
    float* p = att.data<float>() + d.scores(b, h);
    // S = Q K^T on and below the diagonal, then row t's softmax of scale * S over columns 0..t.
    head_sgemm(blocking, k, T, T, d.head_size, rows(q, width), transposed(key, width), p, T, SgemmCausal::c_lower);
    k.softmax_forward_causal(p, p, T, T, d.scale);
    // O = P V, row t summing over the visible steps only (not when only P is asked for).
    if (!out.defined()) return;
    head_sgemm(blocking, k, T, d.head_size, T, rows(p, T), rows(v, width), out.data<float>() + d.at(b, h, d.channels, 0),
               d.channels, SgemmCausal::a_lower);
  });
}

void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& att, const Tensor& dqkv,
                        std::int64_t heads) {
  const Layout d(qkv, heads);
  const CpuKernels& k = cpu_kernels();
  const SgemmBlocking blocking = head_blocking(k);
  const std::int64_t width = 3 * d.channels, T = d.steps;
  for_each_head(d, [&](std::int64_t b, std::int64_t h) {
    thread_local std::vector<float> dscores;
    if (static_cast<std::int64_t>(dscores.size()) < T * T) dscores.resize(static_cast<std::size_t>(T * T));
    float* ds = dscores.data();
    const float* q = qkv.data<float>() + d.at(b, h, width, 0);
    const float* key = qkv.data<float>() + d.at(b, h, width, d.channels);
    const float* v = qkv.data<float>() + d.at(b, h, width, 2 * d.channels);
    const float* p = att.data<float>() + d.scores(b, h);
    const float* dy = dout.data<float>() + d.at(b, h, d.channels, 0);
    float* dq = dqkv.data<float>() + d.at(b, h, width, 0);
    float* dk = dqkv.data<float>() + d.at(b, h, width, d.channels);
    float* dv = dqkv.data<float>() + d.at(b, h, width, 2 * d.channels);
    // dP = dO V^T on and below the diagonal; dV = P^T dO over the steps that saw each one.
    head_sgemm(blocking, k, T, T, d.head_size, rows(dy, d.channels), transposed(v, width), ds, T, SgemmCausal::c_lower);
    head_sgemm(blocking, k, T, d.head_size, T, transposed(p, T), rows(dy, d.channels), dv, width, SgemmCausal::a_upper);
    // dS = softmax'(P) dP per row over its visible columns (zeros above the diagonal).
    for (std::int64_t t = 0; t < T; ++t) k.softmax_backward(p + t * T, ds + t * T, ds + t * T, T, t + 1);
    // dQ = scale dS K; dK = scale dS^T Q.
    head_sgemm(blocking, k, T, d.head_size, T, rows(ds, T), rows(key, width), dq, width, SgemmCausal::a_lower);
    head_sgemm(blocking, k, T, d.head_size, T, transposed(ds, T), rows(q, width), dk, width, SgemmCausal::a_upper);
    scale_rows(dq, T, d.head_size, width, d.scale);
    scale_rows(dk, T, d.head_size, width, d.scale);
  });
}

}  // namespace loom::kernels::cpu
