// Fused causal attention on the CPU: no T x T matrix is stored. Per (sequence, head), forward
// takes one query row at a time, its scores over the visible keys (one row of T), an exact
// two-pass softmax and the weighted sum of values, and keeps only the output and the row's
// log-sum-exp. Backward recomputes each row's probabilities from the log-sum-exp (the
// FlashAttention-2 recurrence) and accumulates dK and dV in fp32 over the rows. Working memory is
// O(T * head_size) per thread. Each (sequence, head) runs on one thread in a fixed order, so
// results do not depend on the thread count; all arithmetic is fp32 from any storage dtype.
#include <cmath>

#include "kernels/cpu/float_types.hpp"
#include "kernels/cpu/region_failure.hpp"
#include "kernels/cpu/training.hpp"
#include "loom/core/tensor.hpp"

namespace loom::kernels::cpu {

namespace {

struct HeadLayout {
  std::int64_t batch, steps, channels, heads, head_size;
  float scale;

  HeadLayout(const Tensor& qkv, std::int64_t num_heads)
      : batch(qkv.size(0)), steps(qkv.size(1)), channels(qkv.size(2) / 3), heads(num_heads),
        head_size(channels / num_heads),
        scale(static_cast<float>(1.0 / std::sqrt(static_cast<double>(channels / num_heads)))) {}
  // Element offset of head h, step 0, of sequence b in a [B, T, width] activation, `offset` columns in.
  std::int64_t at(std::int64_t b, std::int64_t h, std::int64_t width, std::int64_t offset) const {
    return b * steps * width + offset + h * head_size;
  }
};

// sum a[i] b[i] over n, in eight interleaved partial sums added in a fixed order (vectorisable,
// and the same bits on every run).
float dot(const float* a, const float* b, std::int64_t n) {
  float partial[8] = {};
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) partial[l] += a[i + l] * b[i + l];
  }
  for (; i < n; ++i) partial[i % 8] += a[i] * b[i];
  return ((partial[0] + partial[1]) + (partial[2] + partial[3])) + ((partial[4] + partial[5]) + (partial[6] + partial[7]));
}

void axpy(float alpha, const float* x, float* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

// The steps x head_size rows of one head, from a [B, T, width] tensor of storage type T into fp32.
template <class T>
void load_head(const T* src, std::int64_t width, std::int64_t steps, std::int64_t head_size, float* dst) {
  for (std::int64_t t = 0; t < steps; ++t) to_f32(src + t * width, dst + t * head_size, head_size);
}

template <class T>
void store_head(const float* src, std::int64_t width, std::int64_t steps, std::int64_t head_size, T* dst) {
  for (std::int64_t t = 0; t < steps; ++t) from_f32(src + t * head_size, dst + t * width, head_size);
}

// body(b, h, workspace) for every (sequence, head), spread over threads, each with its own fp32
// workspace of `floats` elements (a loom tensor, so counted by the CPU allocator's statistics). The
// first failure is rethrown after the loop (no exception may leave an OpenMP region).
template <class Body>
void for_each_head(const HeadLayout& d, std::int64_t floats, Body&& body) {
  const std::int64_t pairs = d.batch * d.heads;
  RegionFailure failure;
#pragma omp parallel if (pairs > 1 && d.steps * d.steps * d.head_size * pairs > (1 << 18))
  {
    Tensor workspace;
    failure.capture([&] { workspace = Tensor::empty({floats}, DType::f32); });
#pragma omp for schedule(static)
    for (std::int64_t pair = 0; pair < pairs; ++pair) {
      if (!workspace.defined()) continue;
      failure.capture([&] { body(pair / d.heads, pair % d.heads, workspace.data<float>()); });
    }
  }
  failure.rethrow();
}

}  // namespace

void fused_attention_forward(const Tensor& qkv, const Tensor& out, const Tensor& lse, std::int64_t heads) {
  const HeadLayout d(qkv, heads);
  const std::int64_t T = d.steps, hs = d.head_size, width = 3 * d.channels;
  visit_float_dtype(qkv.dtype(), [&]<class S>() {
    // workspace: q, k, v and o as fp32 [T, hs], then one row of scores.
    for_each_head(d, 4 * T * hs + T, [&](std::int64_t b, std::int64_t h, float* work) {
      float *q = work, *k = q + T * hs, *v = k + T * hs, *o = v + T * hs, *scores = o + T * hs;
      load_head(qkv.data<S>() + d.at(b, h, width, 0), width, T, hs, q);
      load_head(qkv.data<S>() + d.at(b, h, width, d.channels), width, T, hs, k);
      load_head(qkv.data<S>() + d.at(b, h, width, 2 * d.channels), width, T, hs, v);
      float* row_lse = lse.data<float>() + (b * d.heads + h) * T;
      for (std::int64_t i = 0; i < T; ++i) {
        float max = -INFINITY;
        for (std::int64_t j = 0; j <= i; ++j) {
          scores[j] = d.scale * dot(q + i * hs, k + j * hs, hs);
          max = std::fmax(max, scores[j]);
        }
        float sum = 0.0f;
        float* oi = o + i * hs;
        std::fill(oi, oi + hs, 0.0f);
        for (std::int64_t j = 0; j <= i; ++j) {
          const float p = std::exp(scores[j] - max);
          sum += p;
          axpy(p, v + j * hs, oi, hs);
        }
        const float inverse = 1.0f / sum;
        for (std::int64_t c = 0; c < hs; ++c) oi[c] *= inverse;
        row_lse[i] = max + std::log(sum);
      }
      store_head(o, d.channels, T, hs, out.data<S>() + d.at(b, h, d.channels, 0));
    });
  });
}

void fused_attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                              const Tensor& dqkv, std::int64_t heads) {
  const HeadLayout d(qkv, heads);
  const std::int64_t T = d.steps, hs = d.head_size, width = 3 * d.channels;
  visit_float_dtype(qkv.dtype(), [&]<class S>() {
    // workspace: q, k, v, o, dO, dq, dk, dv as fp32 [T, hs].
    for_each_head(d, 8 * T * hs, [&](std::int64_t b, std::int64_t h, float* work) {
      float *q = work, *k = q + T * hs, *v = k + T * hs, *o = v + T * hs, *dy = o + T * hs;
      float *dq = dy + T * hs, *dk = dq + T * hs, *dv = dk + T * hs;
      load_head(qkv.data<S>() + d.at(b, h, width, 0), width, T, hs, q);
      load_head(qkv.data<S>() + d.at(b, h, width, d.channels), width, T, hs, k);
      load_head(qkv.data<S>() + d.at(b, h, width, 2 * d.channels), width, T, hs, v);
      load_head(out.data<S>() + d.at(b, h, d.channels, 0), d.channels, T, hs, o);
      load_head(dout.data<S>() + d.at(b, h, d.channels, 0), d.channels, T, hs, dy);
      std::fill(dq, dq + 3 * T * hs, 0.0f);
      const float* row_lse = lse.data<float>() + (b * d.heads + h) * T;
      for (std::int64_t i = 0; i < T; ++i) {
        const float* qi = q + i * hs;
        const float* dyi = dy + i * hs;
        const float delta = dot(dyi, o + i * hs, hs);  // sum_j P_ij dP_ij, from the stored output
        for (std::int64_t j = 0; j <= i; ++j) {
          const float p = std::exp(d.scale * dot(qi, k + j * hs, hs) - row_lse[i]);
          const float ds = p * (dot(dyi, v + j * hs, hs) - delta) * d.scale;
          axpy(p, dyi, dv + j * hs, hs);
          axpy(ds, qi, dk + j * hs, hs);
          axpy(ds, k + j * hs, dq + i * hs, hs);
        }
      }
      store_head(dq, width, T, hs, dqkv.data<S>() + d.at(b, h, width, 0));
      store_head(dk, width, T, hs, dqkv.data<S>() + d.at(b, h, width, d.channels));
      store_head(dv, width, T, hs, dqkv.data<S>() + d.at(b, h, width, 2 * d.channels));
    });
  });
}

}  // namespace loom::kernels::cpu
