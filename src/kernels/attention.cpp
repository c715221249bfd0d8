// Attention as batched GEMMs (batched over heads, one call per sequence) on strided views of
// qkv, plus softmax kernels: device-agnostic, it only calls other kernels. On the CPU, f32 in fp32
// precision goes to the causal path of kernels/cpu/attention.cpp instead.
#include "loom/kernels/attention.hpp"

#include <cmath>

#include "kernels/cpu/training.hpp"
#include "kernels/cuda/training.hpp"
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

// The CPU's causal path applies: f32 on the CPU in fp32 precision, not asked for the composed one.
bool cpu_causal_path(const Tensor& qkv, const AttentionOptions& o) {
  return o.path == AttentionPath::automatic && qkv.device().is_cpu() && qkv.dtype() == DType::f32 &&
         o.precision == GemmPrecision::fp32;
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
  detail::common_device(kernel, {{"qkv", qkv}, {"out", out}, {"att", att}});
  const Dims d = check_attention(kernel, qkv, options);
  detail::require_same_dtype(kernel, {{"qkv", qkv}, {"out", out}, {"att", att}});
  detail::require_shape(kernel, {"out", out}, Shape{d.batch, d.steps, d.channels});
  detail::require_shape(kernel, {"att", att}, Shape{d.batch, d.heads, d.steps, d.steps});
  if (qkv.numel() == 0) return;
  if (cpu_causal_path(qkv, options)) {
    cpu::attention_forward(qkv, out, att, d.heads);
    return;
  }
  const auto scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d.head_size)));
  for (std::int64_t b = 0; b < d.batch; ++b) {
    const StridedMatrix scores = scores_of(att, b, d);
    gemm(heads_of(qkv, b, 0, d), heads_of(qkv, b, d.channels, d), std::nullopt, scores,
         gemm_options(options, false, true, scale), stream);
  }
  softmax_forward(att, att, stream, /*causal=*/true);
  for (std::int64_t b = 0; b < d.batch; ++b) {
    gemm(scores_of(att, b, d), heads_of(qkv, b, 2 * d.channels, d), std::nullopt, heads_of(out, b, 0, d),
         gemm_options(options, false, false, 1.0f), stream);
  }
}

void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& att, const Tensor& dqkv,
                        const AttentionOptions& options, StreamRef stream, const Tensor& scratch) {
  const char* kernel = "attention_backward";
  const Device device = detail::common_device(kernel, {{"dout", dout}, {"qkv", qkv}, {"att", att}, {"dqkv", dqkv}});
  const Dims d = check_attention(kernel, qkv, options);
  detail::require_same_dtype(kernel, {{"qkv", qkv}, {"dout", dout}, {"att", att}, {"dqkv", dqkv}});
  detail::require_shape(kernel, {"dout", dout}, Shape{d.batch, d.steps, d.channels});
  detail::require_shape(kernel, {"att", att}, Shape{d.batch, d.heads, d.steps, d.steps});
  detail::require_shape(kernel, {"dqkv", dqkv}, qkv.shape());
  Tensor work = scratch;
  if (work.defined()) {
    detail::common_device(kernel, {{"qkv", qkv}, {"scratch", work}});
    detail::require_same_dtype(kernel, {{"qkv", qkv}, {"scratch", work}});
    detail::require_shape(kernel, {"scratch", work}, Shape{d.heads, d.steps, d.steps});
  } else if (!cpu_causal_path(qkv, options)) {  // the causal path needs none
    work = Tensor::empty({d.heads, d.steps, d.steps}, qkv.dtype(), device);
  }
  if (qkv.numel() == 0) return;
  if (cpu_causal_path(qkv, options)) {
    cpu::attention_backward(dout, qkv, att, dqkv, d.heads);
    return;
  }
  const auto scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d.head_size)));
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

}  // namespace loom::kernels
