// Causal multi-head self-attention: a fused QKV projection, loom's attention kernel and the
// output projection. The kernel is either the stored one (the [B, NH, T, T] probabilities are kept
// for backward) or the fused one (only a log-sum-exp per row: O(T) memory); see
// loom/kernels/attention.hpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/nn/linear.hpp"

namespace loom::nn {

// automatic: stored while one layer's probabilities ([B, NH, T, T] in the storage dtype) take at
// most fused_threshold_bytes, fused beyond. Stored is the faster kernel on the CPU; on GPUs both
// run on tensor cores (cuBLASLt GEMMs over every head at once, or loom's FlashAttention-2 kernels
// for f16/bf16 with head size 64 or 128), and stored stays the choice at GPT-2's lengths until a
// GPU has measured the two; fused bounds memory for long sequences. Decided at each forward.
enum class AttentionKernel { automatic, stored, fused };
inline constexpr std::int64_t fused_threshold_bytes = std::int64_t{512} << 20;

std::string to_string(AttentionKernel kernel);
// "auto", "stored" or "fused"; anything else is an invalid_argument Error naming the value.
AttentionKernel parse_attention_kernel(const std::string& text);
// The kernel a forward over [batch, steps] runs.
AttentionKernel resolve(AttentionKernel kernel, std::int64_t batch, std::int64_t heads, std::int64_t steps,
                        DType storage);

class CausalSelfAttention {
 public:
  CausalSelfAttention(const std::string& name, std::int64_t channels, std::int64_t heads, const Precision& precision,
                      Device device, AttentionKernel kernel = AttentionKernel::automatic);

  // x: [B, T, C] -> [B, T, C] (a buffer of this layer).
  Tensor forward(const Tensor& x, StreamRef stream = {});
  Tensor backward(const Tensor& dy, StreamRef stream = {});

  Linear& qkv() noexcept { return qkv_; }
  Linear& proj() noexcept { return proj_; }
  void collect_parameters(std::vector<Parameter*>& out);
  AttentionKernel kernel() const noexcept { return kernel_; }
  // The kernel the last forward ran (never automatic; automatic before any forward).
  AttentionKernel last_kernel() const noexcept { return last_kernel_; }

 private:
  std::int64_t channels_, heads_;
  Precision precision_;
  AttentionKernel kernel_, last_kernel_ = AttentionKernel::automatic;
  Linear qkv_, proj_;
  Tensor qkv_out_, att_, lse_, heads_out_, dqkv_;
};

}  // namespace loom::nn
