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

// What a block keeps between its forward and backward. `none`: every activation (its layers'
// buffers). `full`: only its input and output; the forward runs again inside backward (about one
// more forward's compute, the same gradients bit for bit). Megatron-LM's `selective` (keeping the
// GEMM outputs) is not built.
enum class ActivationCheckpointing { none, full };
std::string to_string(ActivationCheckpointing mode);
// "none" or "full"; anything else is an invalid_argument Error naming the value.
ActivationCheckpointing parse_activation_checkpointing(const std::string& text);

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

  // Activation checkpointing (full recomputation): release_activations() drops every buffer of the
  // last forward and backward but the block's output (the next block's input, kept) and a handle to
  // its input; recompute() runs that forward again from the input, inside backward, giving the
  // same bits (every kernel is deterministic), so the backward that follows is unchanged.
  void release_activations();
  void recompute(StreamRef stream = {});

 private:
  Precision precision_;
  LayerNorm ln1_;
  CausalSelfAttention attn_;
  LayerNorm ln2_;
  ColumnParallelLinear fc_;
  RowParallelLinear fc_proj_;
  Tensor input_, hidden_, output_, dhidden_, dx_;
};

}  // namespace loom::nn
