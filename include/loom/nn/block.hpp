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
// more forward's compute). `selective` (Megatron-LM's): the GEMMs' outputs (QKV, the attention's
// heads, the MLP's pre-activation) and the residual stream; the LayerNorms' outputs, the attention
// probabilities, the GELU output (on the CPU; see Linear) and the projections' outputs are dropped,
// and the cheap ones recomputed before backward. Every mode gives the same gradients bit for bit:
// every kernel is deterministic and a recomputation runs the forward's kernel on the forward's
// inputs. After a checkpointed block's backward (either mode) its buffers go back to the model's
// pool for the next block.
enum class ActivationCheckpointing { none, selective, full };
std::string to_string(ActivationCheckpointing mode);
// "none", "selective" or "full"; anything else is an invalid_argument Error naming the value.
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

  // Activation checkpointing. After forward, release_activations(mode) drops what `mode` does not
  // keep (full: every buffer but the block's output, the next block's input, and a handle on its
  // input); before backward, recompute(mode) makes it again from what was kept, with the forward's
  // bits, so the backward that follows is unchanged. release_activations(full) after backward
  // hands every buffer back. `none` does nothing.
  void release_activations(ActivationCheckpointing mode = ActivationCheckpointing::full);
  void recompute(ActivationCheckpointing mode = ActivationCheckpointing::full, StreamRef stream = {});

 private:
  Precision precision_;
  LayerNorm ln1_;
  CausalSelfAttention attn_;
  LayerNorm ln2_;
  ColumnParallelLinear fc_;
  RowParallelLinear fc_proj_;
  Tensor input_, hidden_, output_;  // (backward's gradients live in ln1_'s and ln2_'s dx buffers)
};

}  // namespace loom::nn
