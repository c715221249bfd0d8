// The local parts of a vocabulary split over the ranks of a tensor group (Megatron-LM's
// vocabulary-parallel embedding and cross-entropy): each rank holds the rows of the token
// embedding, and the columns of the logits, of its own range of token ids, so the full [rows, V]
// logits are never gathered on one rank. These kernels do one rank's share; the caller
// (nn/vocab_parallel.hpp) all-reduces between them over the tensor group.
//
// Cross-entropy, in three local passes and two all-reduces:
//   1. vocab_parallel_max:     row_max[r] = max_j logits[r, j]                  -> all-reduce max
//   2. vocab_parallel_sum_exp: partial[r] = (sum_j exp(logits[r, j] - row_max[r]),
//                                            logits[r, t - first] if this rank holds t, else 0)
//                                                                               -> all-reduce sum
//      vocab_parallel_loss:    losses[r] = log(partial[r][0]) + row_max[r] - partial[r][1]
//   3. vocab_parallel_backward: dlogits[r, j] = dlosses[r] * (exp(logits[r, j] - row_max[r]) /
//                                                 partial[r][0] - [first + j == t])
// A row whose target is ignore_index has loss 0 and gradient 0. Columns at or past `valid` are
// padding: they take no part and get gradient 0. All arithmetic in fp32 whatever the logits' dtype.
#pragma once

#include <cstdint>

#include "loom/core/stream.hpp"
#include "loom/core/tensor.hpp"
#include "loom/kernels/indices.hpp"

namespace loom::kernels {

struct VocabShard {
  std::int64_t first = 0;         // the token id of this rank's column (or embedding row) 0
  std::int64_t valid = -1;        // this rank's real columns (or rows); -1: all of them
  std::int64_t vocab_size = 0;    // the whole vocabulary (targets and tokens are checked against it)
  std::int64_t ignore_index = -1;
};

// logits: [rows, Vl] floating; row_max: [rows] f32.
void vocab_parallel_max(const Tensor& logits, const Tensor& row_max, const VocabShard& shard, StreamRef stream = {});
// targets: [rows] i32 or i64, each in [0, vocab_size) or ignore_index (checked on the CPU here, and
// on a GPU by the index check); row_max: the all-reduced maxima; partial: [rows, 2] f32.
void vocab_parallel_sum_exp(const Tensor& logits, const Tensor& targets, const Tensor& row_max, const Tensor& partial,
                            const VocabShard& shard, StreamRef stream = {});
// partial: the all-reduced sums; losses: [rows] f32.
void vocab_parallel_loss(const Tensor& targets, const Tensor& row_max, const Tensor& partial, const Tensor& losses,
                         const VocabShard& shard, StreamRef stream = {});
// dlosses: [rows] f32; dlogits: like logits (may be logits: computed in place).
void vocab_parallel_backward(const Tensor& logits, const Tensor& targets, const Tensor& row_max, const Tensor& partial,
                             const Tensor& dlosses, const Tensor& dlogits, const VocabShard& shard,
                             StreamRef stream = {});

// The embedding: out[b, t, :] = wte_shard[tokens[b, t] - first, :] for the tokens this rank holds,
// zeros for the others (the all-reduce sum over the group then gives every rank the full lookup).
// With wpe ([maxT, C], the position embedding; one rank of the group passes it, so that the sum
// holds it once) each row adds wpe[t, :], the sum rounded once as embedding_forward rounds it.
// tokens: [B, T] i32 in [0, vocab_size); wte_shard: [Vl, C]; out: [B, T, C], wte's dtype. On a GPU
// the tokens are range-checked (which waits for the device) unless `check` says they were.
void vocab_parallel_embedding_forward(const Tensor& tokens, const Tensor& wte_shard, const Tensor& wpe,
                                      const Tensor& out, const VocabShard& shard, StreamRef stream = {},
                                      IndexCheck check = IndexCheck::checked);
// dwte_shard[v - first] += sum of dout[b, t] over the positions holding token v, for this rank's
// tokens; with dwpe (f32 [maxT, C]), dwpe[t] += sum over b of dout[b, t] too. In a fixed order
// (deterministic): on the CPU the same additions as embedding_backward. dwte_shard: f32.
void vocab_parallel_embedding_backward(const Tensor& tokens, const Tensor& dout, const Tensor& dwte_shard,
                                       const Tensor& dwpe, const VocabShard& shard, StreamRef stream = {});

}  // namespace loom::kernels
