// How many bytes a GPT's activations take on one rank, per micro-batch: the peak of the allocator's
// `activations` category over a forward and backward (the layers' buffers kept for backward, their
// gradients, and the logits), which is also what stays live between steps, since loom's layers
// keep their buffers for the next step.
//
// Fitted to loom's own buffers, not taken from a paper: the counts below are the least-squares
// fit of 192 measured CPU runs (2 and 4 layers, width 64 and 128, context 32 and 64, batch 4 and
// 8, vocabulary 64 and 256, fp32 and bf16, every checkpointing mode; largest error 0.2%) and of
// 48 runs at tensor parallelism 2 and 4, and they match the buffers each block allocates
// (benchmarks/results/activation-fit-zen4-2026-12-04.txt). Since 6621e81 a block's backward keeps
// its gradients in its LayerNorms' dx buffers: two units fewer per block (none, full), one fewer in
// selective's recomputed block, re-checked on unit/plan/test_activations.cpp's 7 cases (within
// 0.8%). With N = B x T tokens, s the storage dtype's bytes, t the tensor-parallel ranks and a
// block's [N, C] buffers counted in units of s N C:
//
//   kept per block      none 10 + 24/t      (ln1, qkv 3/t, heads 1/t, proj, hidden, ln2, fc 4/t and
//                                             GELU 4/t, fc_proj, output, and their gradients)
//                       selective 2 + 8/t   (hidden, output, qkv, heads and the fc pre-activation;
//                                             + 4/t where the GELU is not recomputed: CUDA)
//                       full 1              (the block's output)
//   once, if any block is checkpointed: one block's recomputed buffers, selective 7 + 16/t,
//                       full 10 + 24/t; and 4 for the embedding and final norm in every mode
//   attention probabilities s B (H/t) T^2 per stored-attention block kept (and once while one
//                       is recomputed); the fused kernel keeps 4 B (H/t) T bytes of row statistics
//   LayerNorm statistics 32 N bytes per kept block (16 under selective)
//   logits              s N V_padded / t, twice under tensor parallelism (the vocabulary-parallel
//                       cross-entropy keeps the logits' block and its gradient)
// Data-parallel layouts (DDP, ZeRO 1-3) do not change these: each rank runs the whole micro-batch.
#pragma once

#include <cstdint>

#include "loom/nn/attention.hpp"
#include "loom/nn/block.hpp"
#include "loom/nn/gpt.hpp"

namespace loom::plan {

struct ActivationShape {
  nn::GPTConfig model;              // layers, heads, channels, vocabulary and checkpointing
  std::int64_t batch = 1;           // micro-batch (sequences)
  std::int64_t steps = 0;           // sequence length (0: the model's context)
  std::int64_t storage_bytes = 4;   // 4 (fp32/tf32) or 2 (bf16/fp16)
  int tensor = 1;                   // tensor-parallel ranks
  bool cpu = true;                  // the CPU recomputes the GELU under selective; CUDA keeps it
};

struct ActivationBytes {
  std::int64_t blocks = 0;      // what the blocks keep for backward, with one recomputed block
  std::int64_t attention = 0;   // attention probabilities (or the fused kernel's statistics)
  std::int64_t logits = 0;      // the head's logits (and their gradient under tensor parallelism)
  std::int64_t total() const noexcept { return blocks + attention + logits; }
};

// Throws an invalid_argument Error for a non-positive batch, a tensor size that does not divide
// the heads, or an invalid model.
ActivationBytes predict_activations(const ActivationShape& shape);

}  // namespace loom::plan
