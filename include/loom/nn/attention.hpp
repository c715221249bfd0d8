// Causal multi-head self-attention: a fused QKV projection, loom's attention kernel and the
// output projection. Under tensor parallelism (a tensor group of N ranks) it is split by heads, as
// Megatron-LM splits it: rank r runs heads [H r / N, H (r + 1) / N), the QKV projection is
// column-parallel with three stacked parts (its rows of q, of k and of v), the output projection
// row-parallel; one all-reduce forward and one backward. The kernel is either the stored one (the [B, NH, T, T] probabilities are kept
// for backward) or the fused one (only a log-sum-exp per row: O(T) memory); see
// loom/kernels/attention.hpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/comm/communicator.hpp"
#include "loom/nn/tensor_parallel.hpp"

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
  // tensor: the tensor group (null: none); heads must divide by its size.
  CausalSelfAttention(const std::string& name, std::int64_t channels, std::int64_t heads, const Precision& precision,
                      Device device, AttentionKernel kernel = AttentionKernel::automatic,
                      comm::Communicator* tensor = nullptr);

  // x: [B, T, C] -> [B, T, C] (a buffer of this layer).
  Tensor forward(const Tensor& x, StreamRef stream = {});
  Tensor backward(const Tensor& dy, StreamRef stream = {});

  ColumnParallelLinear& qkv() noexcept { return qkv_; }
  RowParallelLinear& proj() noexcept { return proj_; }
  void collect_parameters(std::vector<Parameter*>& out);
  // Drops the buffers of the last forward and backward (activation checkpointing frees them between
  // a unit's forward and its recomputation in backward); the next forward allocates them again.
  void release_activations();
  // Selective recomputation (nn/block.hpp): release_recomputable() drops the stored kernel's
  // probabilities [B, NH, T, T] and the output projection's output (which the block has added to the
  // residual stream); recompute_probabilities() runs the stored kernel again over the kept qkv,
  // rewriting the kept heads' output with the same bits. The fused kernel keeps nothing to drop.
  void release_recomputable();
  void recompute_probabilities(StreamRef stream = {});
  AttentionKernel kernel() const noexcept { return kernel_; }
  // The kernel the last forward ran (never automatic; automatic before any forward).
  AttentionKernel last_kernel() const noexcept { return last_kernel_; }

 private:
  std::int64_t channels_, heads_;  // this rank's: all of them without tensor parallelism
  Precision precision_;
  AttentionKernel kernel_, last_kernel_ = AttentionKernel::automatic;
  ColumnParallelLinear qkv_;
  RowParallelLinear proj_;
  Tensor qkv_out_, att_, lse_, heads_out_, dqkv_;
};

}  // namespace loom::nn
