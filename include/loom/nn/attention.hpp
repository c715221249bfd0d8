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

// automatic: fused on CUDA devices, stored on the CPU (whose stored path is the one checked
// against PyTorch bit for bit in loom's tests).
enum class AttentionKernel { automatic, stored, fused };

std::string to_string(AttentionKernel kernel);
// "auto", "stored" or "fused"; anything else is an invalid_argument Error naming the value.
AttentionKernel parse_attention_kernel(const std::string& text);
// What automatic means on `device`.
AttentionKernel resolve(AttentionKernel kernel, Device device);

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
  AttentionKernel kernel() const noexcept { return kernel_; }  // never automatic

 private:
  std::int64_t channels_, heads_;
  Precision precision_;
  AttentionKernel kernel_;
  Linear qkv_, proj_;
  Tensor qkv_out_, att_, lse_, heads_out_, dqkv_, scratch_;
};

}  // namespace loom::nn
