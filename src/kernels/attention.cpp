// Attention as batched GEMMs on views of qkv plus softmax kernels: device-agnostic, it only calls
// other kernels. The composed path loops over sequences (GEMMs batched over one sequence's heads on
// strided views of qkv); the head-major path copies the heads to [3, B, NH, T, hs] first so that
// each GEMM is one call over every head. On the CPU, f32 in fp32 precision goes to the causal path
// of kernels/cpu/attention.cpp instead.
#include "loom/kernels/attention.hpp"

#include <cmath>

#include "kernels/cpu/training.hpp"
#include "kernels/cuda/training.hpp"
#include "loom/core/caching_allocator.hpp"
#include "loom/kernels/softmax.hpp"
#include "validate.hpp"

namespace loom::kernels {

namespace {

struct Dims {
  std::int64_t batch, steps, channels, heads, head_size;
};

Dims check_attention(const char* kernel, const Tensor& qkv, const AttentionOptions& options) {
  detail::require_floating(kernel, {"qkv", qkv});
  require(qkv.rank() == 3 && qkv.size(2) % 3 == 0, kernel, ": qkv must be [B, T, 3C], got ", qkv);
  Dims d{qkv.size(0), qkv.size(1), qkv.size(2) / 3, options.num_heads, 0};
  require(d.heads >= 1 && d.channels % d.heads == 0, kernel, ": ", d.channels, " channels do not split into ", d.heads,
          " heads");
  d.head_size = d.channels / d.heads;
  require(qkv.dtype() == input_dtype(options.precision), kernel, ": precision ", to_string(options.precision),
          " does not suit ", qkv);
  return d;
}

// `count` head matrices of rows x cols starting `offset` elements into sequence b of `tensor`
// (a [B, T, width] activation), head h at column offset + h * cols.
StridedMatrix heads_of(const Tensor& tensor, std::int64_t b, std::int64_t offset, const Dims& d) {
  const std::int64_t width = tensor.size(2);
  StridedMatrix m;
  m.tensor = tensor.flatten().slice(b * d.steps * width + offset, tensor.numel());
  m.rows = d.steps;
  m.cols = d.head_size;
  m.ld = width;
  m.batch = d.heads;
  m.batch_stride = d.head_size;
  return m;
}

// The NH x T x T score matrices of one sequence in `scores` ([B, NH, T, T] or [NH, T, T]).
StridedMatrix scores_of(const Tensor& scores, std::int64_t b, const Dims& d) {
  StridedMatrix m;
  m.tensor = scores.flatten().slice(b * d.heads * d.steps * d.steps, scores.numel());
  m.rows = m.cols = m.ld = d.steps;
  m.batch = d.heads;
  m.batch_stride = d.steps * d.steps;
  return m;
}

enum class Route { cpu_causal, composed, head_major };

// automatic: the CPU's causal path for f32 on the CPU in fp32 precision, head-major on CUDA.
Route route_of(const Tensor& qkv, const AttentionOptions& o) {
  if (o.path == AttentionPath::automatic && qkv.device().is_cpu() && qkv.dtype() == DType::f32 &&
      o.precision == GemmPrecision::fp32) {
    return Route::cpu_causal;
  }
  if (o.path == AttentionPath::head_major || (o.path == AttentionPath::automatic && !qkv.device().is_cpu())) {
    return Route::head_major;
  }
  return Route::composed;
}

Tensor scratch(const Shape& shape, const Tensor& like, StreamRef stream) {
  return Tensor::empty(shape, like.dtype(), shared_scratch_allocator(like.device()), stream);
}

// Head-major working memory [K, B, NH, T, hs] and its views.
struct HeadMajor {
  Tensor heads;
  Dims d;

  // Group k as B * NH matrices of T x hs.
  StridedMatrix group(std::int64_t k) const {
    const std::int64_t size = d.batch * d.steps * d.channels;
    StridedMatrix m;
    m.tensor = heads.flatten().slice(k * size, (k + 1) * size);
    m.rows = d.steps;
    m.cols = m.ld = d.head_size;
    m.batch = d.batch * d.heads;
    m.batch_stride = d.steps * d.head_size;
    return m;
  }
  // Group k alone as a [1, B, NH, T, hs] tensor.
  Tensor group_tensor(std::int64_t k) const {
    return group(k).tensor.view({1, d.batch, d.heads, d.steps, d.head_size});
  }
};

HeadMajor head_major_copy(const Tensor& x, const Dims& d, StreamRef stream) {
  const std::int64_t groups = x.size(2) / d.channels;
  HeadMajor h{scratch({groups, d.batch, d.heads, d.steps, d.head_size}, x, stream), d};
  split_heads(x, h.heads, d.heads, stream);
  return h;
}

// Every score matrix of a [B, NH, T, T] tensor: B * NH matrices of T x T.
StridedMatrix all_scores(const Tensor& scores, const Dims& d) {
  StridedMatrix m;
  m.tensor = scores;
  m.rows = m.cols = m.ld = d.steps;
  m.batch = d.batch * d.heads;
  m.batch_stride = d.steps * d.steps;
  return m;
}

GemmOptions gemm_options(const AttentionOptions& o, bool trans_a, bool trans_b, float alpha) {
  GemmOptions g;
  g.trans_a = trans_a;
  g.trans_b = trans_b;
  g.alpha = alpha;
  g.precision = o.precision;
  return g;
}

}  // namespace

void attention_forward(const Tensor& qkv, const Tensor& out, const Tensor& att, const AttentionOptions& options,
                       StreamRef stream) {
  const char* kernel = "attention_forward";
  // Without out, only the probabilities (selective checkpointing rebuilds them; the output is kept).
  const bool with_out = out.defined();
  detail::common_device(kernel, {{"qkv", qkv}, {"out", with_out ? out : qkv}, {"att", att}});
  const Dims d = check_attention(kernel, qkv, options);
  detail::require_same_dtype(kernel, {{"qkv", qkv}, {"out", with_out ? out : qkv}, {"att", att}});
  if (with_out) detail::require_shape(kernel, {"out", out}, Shape{d.batch, d.steps, d.channels});
  detail::require_shape(kernel, {"att", att}, Shape{d.batch, d.heads, d.steps, d.steps});
  if (qkv.numel() == 0) return;
  const Route route = route_of(qkv, options);
  if (route == Route::cpu_causal) {
    cpu::attention_forward(qkv, out, att, d.heads);
    return;
  }
  const auto scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d.head_size)));
  if (route == Route::head_major) {
    const HeadMajor h = head_major_copy(qkv, d, stream);
    const StridedMatrix scores = all_scores(att, d);
    gemm(h.group(0), h.group(1), std::nullopt, scores, gemm_options(options, false, true, scale), stream);
    softmax_forward(att, att, stream, /*causal=*/true);
    if (!with_out) return;
    // out = att v, into q's place (q is not needed any more)
    gemm(scores, h.group(2), std::nullopt, h.group(0), gemm_options(options, false, false, 1.0f), stream);
    merge_heads(h.group_tensor(0), out, d.heads, stream);
    return;
  }
  for (std::int64_t b = 0; b < d.batch; ++b) {
    const StridedMatrix scores = scores_of(att, b, d);
    gemm(heads_of(qkv, b, 0, d), heads_of(qkv, b, d.channels, d), std::nullopt, scores,
         gemm_options(options, false, true, scale), stream);
  }
  softmax_forward(att, att, stream, /*causal=*/true);
  for (std::int64_t b = 0; with_out && b < d.batch; ++b) {
    gemm(scores_of(att, b, d), heads_of(qkv, b, 2 * d.channels, d), std::nullopt, heads_of(out, b, 0, d),
         gemm_options(options, false, false, 1.0f), stream);
  }
}

void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& att, const Tensor& dqkv,
                        const AttentionOptions& options, StreamRef stream, const Tensor& scratch_memory) {
  const char* kernel = "attention_backward";
  detail::common_device(kernel, {{"dout", dout}, {"qkv", qkv}, {"att", att}, {"dqkv", dqkv}});
  const Dims d = check_attention(kernel, qkv, options);
  detail::require_same_dtype(kernel, {{"qkv", qkv}, {"dout", dout}, {"att", att}, {"dqkv", dqkv}});
  detail::require_shape(kernel, {"dout", dout}, Shape{d.batch, d.steps, d.channels});
  detail::require_shape(kernel, {"att", att}, Shape{d.batch, d.heads, d.steps, d.steps});
  detail::require_shape(kernel, {"dqkv", dqkv}, qkv.shape());
  const Route route = route_of(qkv, options);
  if (scratch_memory.defined()) {
    detail::common_device(kernel, {{"qkv", qkv}, {"scratch", scratch_memory}});
    detail::require_same_dtype(kernel, {{"qkv", qkv}, {"scratch", scratch_memory}});
    detail::require_shape(kernel, {"scratch", scratch_memory}, Shape{d.heads, d.steps, d.steps});
  }
  if (qkv.numel() == 0) return;
  if (route == Route::cpu_causal) {
    cpu::attention_backward(dout, qkv, att, dqkv, d.heads);
    return;
  }
  const auto scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d.head_size)));
  if (route == Route::head_major) {
    const HeadMajor h = head_major_copy(qkv, d, stream);
    const HeadMajor grads{scratch(h.heads.shape(), qkv, stream), d};  // [dq, dk, dv]
    split_heads(dout, grads.group_tensor(0), d.heads, stream);        // dout's heads, in dq's place until dq
    const Tensor datt = scratch(att.shape(), qkv, stream);
    const StridedMatrix probs = all_scores(att, d), dscores = all_scores(datt, d), dout_heads = grads.group(0);
    // datt = dout v^T; dv = att^T dout
    gemm(dout_heads, h.group(2), std::nullopt, dscores, gemm_options(options, false, true, 1.0f), stream);
    gemm(probs, dout_heads, std::nullopt, grads.group(2), gemm_options(options, true, false, 1.0f), stream);
    const std::int64_t rows = d.batch * d.heads * d.steps;
    softmax_backward(att.view({rows, d.steps}), datt.view({rows, d.steps}), datt.view({rows, d.steps}), stream);
    // dq = dscores k / sqrt(hs); dk = dscores^T q / sqrt(hs)
    gemm(dscores, h.group(1), std::nullopt, grads.group(0), gemm_options(options, false, false, scale), stream);
    gemm(dscores, h.group(0), std::nullopt, grads.group(1), gemm_options(options, true, false, scale), stream);
    merge_heads(grads.heads, dqkv, d.heads, stream);
    return;
  }
  const Tensor work = scratch_memory.defined() ? scratch_memory : scratch({d.heads, d.steps, d.steps}, qkv, stream);
  const StridedMatrix datt = scores_of(work, 0, d);
  for (std::int64_t b = 0; b < d.batch; ++b) {
    const StridedMatrix probs = scores_of(att, b, d), dout_heads = heads_of(dout, b, 0, d);
    const StridedMatrix q = heads_of(qkv, b, 0, d), k = heads_of(qkv, b, d.channels, d),
                        v = heads_of(qkv, b, 2 * d.channels, d);
    // datt = dout v^T; dv = att^T dout
    gemm(dout_heads, v, std::nullopt, datt, gemm_options(options, false, true, 1.0f), stream);
    gemm(probs, dout_heads, std::nullopt, heads_of(dqkv, b, 2 * d.channels, d), gemm_options(options, true, false, 1.0f),
         stream);
    // dscores = softmax'(att) datt (masked entries have att = 0, so their gradient is 0)
    const Tensor att_b = att.flatten().slice(b * d.heads * d.steps * d.steps, (b + 1) * d.heads * d.steps * d.steps);
    softmax_backward(att_b.view({d.heads * d.steps, d.steps}), work.view({d.heads * d.steps, d.steps}),
                     work.view({d.heads * d.steps, d.steps}), stream);
    // dq = dscores k / sqrt(hs); dk = dscores^T q / sqrt(hs)
    gemm(datt, k, std::nullopt, heads_of(dqkv, b, 0, d), gemm_options(options, false, false, scale), stream);
    gemm(datt, q, std::nullopt, heads_of(dqkv, b, d.channels, d), gemm_options(options, true, false, scale), stream);
  }
}

namespace {

Dims check_fused(const char* kernel, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                 const AttentionOptions& options) {
  const Dims d = check_attention(kernel, qkv, options);
  detail::require_same_dtype(kernel, {{"qkv", qkv}, {"out", out}});
  detail::require_shape(kernel, {"out", out}, Shape{d.batch, d.steps, d.channels});
  detail::require_dtype(kernel, {"lse", lse}, DType::f32);
  detail::require_shape(kernel, {"lse", lse}, Shape{d.batch, d.heads, d.steps});
  if (!qkv.device().is_cpu()) {
    require(d.head_size <= 128, kernel, ": head size ", d.head_size, " exceeds the CUDA kernel's limit of 128");
  }
  return d;
}

}  // namespace

void fused_attention_forward(const Tensor& qkv, const Tensor& out, const Tensor& lse, const AttentionOptions& options,
                             StreamRef stream) {
  const char* kernel = "fused_attention_forward";
  const Device device = detail::common_device(kernel, {{"qkv", qkv}, {"out", out}, {"lse", lse}});
  check_fused(kernel, qkv, out, lse, options);
  require(!out.shares_storage_with(qkv), kernel, ": out must not share storage with qkv");
  if (qkv.numel() == 0) return;
  detail::dispatch(kernel, device, stream, [&] { cpu::fused_attention_forward(qkv, out, lse, options.num_heads); },
                   [&](void* s) { cuda::fused_attention_forward(qkv, out, lse, options.num_heads, s); });
}

void fused_attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                              const Tensor& dqkv, const AttentionOptions& options, StreamRef stream) {
  const char* kernel = "fused_attention_backward";
  const Device device = detail::common_device(
      kernel, {{"dout", dout}, {"qkv", qkv}, {"out", out}, {"lse", lse}, {"dqkv", dqkv}});
  check_fused(kernel, qkv, out, lse, options);
  detail::require_same_dtype(kernel, {{"qkv", qkv}, {"dout", dout}, {"dqkv", dqkv}});
  detail::require_shape(kernel, {"dout", dout}, out.shape());
  detail::require_shape(kernel, {"dqkv", dqkv}, qkv.shape());
  for (const detail::Arg input : {detail::Arg{"dout", dout}, detail::Arg{"qkv", qkv}, detail::Arg{"out", out}}) {
    require(!dqkv.shares_storage_with(input.tensor), kernel, ": dqkv must not share storage with ", input.name);
  }
  if (qkv.numel() == 0) return;
  detail::dispatch(
      kernel, device, stream, [&] { cpu::fused_attention_backward(dout, qkv, out, lse, dqkv, options.num_heads); },
      [&](void* s) { cuda::fused_attention_backward(dout, qkv, out, lse, dqkv, options.num_heads, s); });
}

namespace {

void permute_heads(const char* kernel, const Tensor& x, const Tensor& heads, std::int64_t num_heads, bool to_heads,
                   StreamRef stream) {
  const Device device = detail::common_device(kernel, {{"x", x}, {"heads", heads}});
  detail::require_same_dtype(kernel, {{"x", x}, {"heads", heads}});
  require(num_heads >= 1, kernel, ": num_heads must be positive, got ", num_heads);
  require(heads.rank() == 5 && heads.size(2) == num_heads, kernel, ": heads must be [K, B, ", num_heads,
          ", T, hs], got ", heads);
  const Shape& h = heads.shape();
  detail::require_shape(kernel, {"x", x}, Shape{h[1], h[3], h[0] * h[2] * h[4]});
  require(!x.shares_storage_with(heads), kernel, ": x and heads must not share storage");
  if (x.numel() == 0) return;
  detail::dispatch(kernel, device, stream, [&] { cpu::permute_heads(x, heads, num_heads, to_heads); },
                   [&](void* s) { cuda::permute_heads(x, heads, num_heads, to_heads, s); });
}

}  // namespace

void split_heads(const Tensor& x, const Tensor& heads, std::int64_t num_heads, StreamRef stream) {
  permute_heads("split_heads", x, heads, num_heads, true, stream);
}

void merge_heads(const Tensor& heads, const Tensor& x, std::int64_t num_heads, StreamRef stream) {
  permute_heads("merge_heads", x, heads, num_heads, false, stream);
}

}  // namespace loom::kernels
