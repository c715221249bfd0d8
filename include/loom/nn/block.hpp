// A GPT-2 transformer block (pre-LayerNorm):
//   h = x + attn(ln1(x));  out = h + mlp(ln2(h)),  mlp(z) = proj(gelu(fc(z))), fc: C -> 4C.
// Under tensor parallelism the attention is split by heads and the MLP is column (fc) then row
// (proj) parallel; the LayerNorms and the residual stream are whole on every rank of the group.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/nn/attention.hpp"
#include "loom/nn/layernorm.hpp"
#include "loom/nn/linear.hpp"

namespace loom::nn {

class TransformerBlock {
 public:
  // tensor: the tensor group (null: none).
  TransformerBlock(const std::string& name, std::int64_t channels, std::int64_t heads, const Precision& precision,
                   Device device, AttentionKernel attention = AttentionKernel::automatic,
                   comm::Communicator* tensor = nullptr);

  // x: [B, T, C] -> [B, T, C] (a buffer of this block).
  Tensor forward(const Tensor& x, StreamRef stream = {});
  // dy: [B, T, C] -> dx (a buffer of this block); gradients accumulated and marked ready.
  Tensor backward(const Tensor& dy, StreamRef stream = {});

  CausalSelfAttention& attention() noexcept { return attn_; }
  ColumnParallelLinear& fc() noexcept { return fc_; }
  RowParallelLinear& fc_proj() noexcept { return fc_proj_; }
  void collect_parameters(std::vector<Parameter*>& out);

 private:
  Precision precision_;
  LayerNorm ln1_;
  CausalSelfAttention attn_;
  LayerNorm ln2_;
  ColumnParallelLinear fc_;
  RowParallelLinear fc_proj_;
  Tensor hidden_, output_, dhidden_, dx_;
};

}  // namespace loom::nn
