#include "loom/nn/attention.hpp"

#include "loom/core/error.hpp"
#include "loom/kernels/attention.hpp"
#include "src/nn/buffer.hpp"

namespace loom::nn {

std::string to_string(AttentionKernel kernel) {
  switch (kernel) {
    case AttentionKernel::automatic: return "auto";
    case AttentionKernel::stored: return "stored";
    case AttentionKernel::fused: return "fused";
  }
  return "unknown";
}

AttentionKernel parse_attention_kernel(const std::string& text) {
  for (AttentionKernel k : {AttentionKernel::automatic, AttentionKernel::stored, AttentionKernel::fused}) {
    if (text == to_string(k)) return k;
  }
  fail(ErrorCategory::invalid_argument, "attention kernel '", text, "' is not one of auto, stored, fused");
}

AttentionKernel resolve(AttentionKernel kernel, std::int64_t batch, std::int64_t heads, std::int64_t steps,
                        DType storage) {
  if (kernel != AttentionKernel::automatic) return kernel;
  const auto bytes = static_cast<double>(batch) * static_cast<double>(heads) * static_cast<double>(steps) *
                     static_cast<double>(steps) * static_cast<double>(dtype_size(storage));
  return bytes > static_cast<double>(fused_threshold_bytes) ? AttentionKernel::fused : AttentionKernel::stored;
}

namespace {

// The heads a rank of the tensor group runs (checked before any layer is built).
std::int64_t local_heads(const std::string& name, std::int64_t channels, std::int64_t heads,
                         const comm::Communicator* tensor) {
  require(heads > 0 && channels % heads == 0, "attention '", name, "': ", channels, " channels do not split into ",
          heads, " heads");
  const int ranks = tensor != nullptr ? tensor->size() : 1;
  require(heads % ranks == 0, "attention '", name, "': ", heads, " heads do not divide over the ", ranks,
          " ranks of the tensor group");
  return heads / ranks;
}

}  // namespace

CausalSelfAttention::CausalSelfAttention(const std::string& name, std::int64_t channels, std::int64_t heads,
                                         const Precision& precision, Device device, AttentionKernel kernel,
                                         comm::Communicator* tensor)
    : channels_(channels / heads * local_heads(name, channels, heads, tensor)),
      heads_(local_heads(name, channels, heads, tensor)),
      precision_(precision),
      kernel_(kernel),
      qkv_(name + ".qkv", channels, 3 * channels, {}, precision, device, tensor, 3),
      proj_(name + ".proj", channels, channels, true, precision, device, tensor) {}

void CausalSelfAttention::collect_parameters(std::vector<Parameter*>& out) {
  qkv_.collect_parameters(out);
  proj_.collect_parameters(out);
}

void CausalSelfAttention::release_activations() {
  qkv_.release_activations();
  proj_.release_activations();
  qkv_out_ = Tensor();  // (a handle on the QKV layer's buffer, which it releases)
  for (Tensor* t : {&att_, &lse_, &heads_out_, &dqkv_}) detail::release(*t);
}

void CausalSelfAttention::release_recomputable() {
  proj_.release_output();
  detail::release(att_);
}

void CausalSelfAttention::recompute_probabilities(StreamRef stream) {
  require(qkv_out_.defined(), "attention: recompute before forward");
  if (last_kernel_ != AttentionKernel::stored) return;
  const std::int64_t batch = qkv_out_.shape()[0], steps = qkv_out_.shape()[1];
  detail::ensure_buffer(att_, {batch, heads_, steps, steps}, precision_.storage, qkv_out_.device());
  kernels::AttentionOptions options;
  options.num_heads = heads_;
  options.precision = precision_.gemm;
  kernels::attention_forward(qkv_out_, Tensor(), att_, options, stream);  // (the heads' output is kept)
}

Tensor CausalSelfAttention::forward(const Tensor& x, StreamRef stream) {
  require(x.defined() && x.shape().rank() == 3, "attention: input must be [B, T, C], got ",
          x);
  const std::int64_t batch = x.shape()[0], steps = x.shape()[1];
  const Device device = x.device();
  qkv_out_ = qkv_.forward(x, stream);
  detail::ensure_buffer(heads_out_, {batch, steps, channels_}, precision_.storage, device);
  kernels::AttentionOptions options;
  options.num_heads = heads_;
  options.precision = precision_.gemm;
  last_kernel_ = resolve(kernel_, batch, heads_, steps, precision_.storage);
  if (last_kernel_ == AttentionKernel::fused) {
    detail::ensure_buffer(lse_, {batch, heads_, steps}, DType::f32, device);
    kernels::fused_attention_forward(qkv_out_, heads_out_, lse_, options, stream);
  } else {
    detail::ensure_buffer(att_, {batch, heads_, steps, steps}, precision_.storage, device);
    kernels::attention_forward(qkv_out_, heads_out_, att_, options, stream);
  }
  return proj_.forward(heads_out_, stream);
}

Tensor CausalSelfAttention::backward(const Tensor& dy, StreamRef stream) {
  const Tensor dheads = proj_.backward(dy, stream);
  const Device device = qkv_out_.device();
  detail::ensure_buffer(dqkv_, qkv_out_.shape(), precision_.storage, device);
  kernels::AttentionOptions options;
  options.num_heads = heads_;
  options.precision = precision_.gemm;
  if (last_kernel_ == AttentionKernel::fused) {
    kernels::fused_attention_backward(dheads, qkv_out_, heads_out_, lse_, dqkv_, options, stream);
  } else {
    kernels::attention_backward(dheads, qkv_out_, att_, dqkv_, options, stream);
  }
  return qkv_.backward(dqkv_, stream);
}

}  // namespace loom::nn
