// Causal multi-head self-attention: a fused QKV projection, loom's attention kernel and the
// output projection.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/nn/linear.hpp"

namespace loom::nn {

class CausalSelfAttention {
 public:
  CausalSelfAttention(const std::string& name, std::int64_t channels, std::int64_t heads, const Precision& precision,
                      Device device);

  // x: [B, T, C] -> [B, T, C] (a buffer of this layer).
  Tensor forward(const Tensor& x, StreamRef stream = {});
  Tensor backward(const Tensor& dy, StreamRef stream = {});

  Linear& qkv() noexcept { return qkv_; }
  Linear& proj() noexcept { return proj_; }
  void collect_parameters(std::vector<Parameter*>& out);

 private:
  std::int64_t channels_, heads_;
  Precision precision_;
  Linear qkv_, proj_;
  Tensor qkv_out_, att_, heads_out_, dqkv_, scratch_;
};

}  // namespace loom::nn
