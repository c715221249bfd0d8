// Softmax + cross-entropy fused over the vocabulary: no probability tensor is kept; the backward
// pass recomputes the softmax from the logits.
#pragma once

#include <cstdint>

#include "loom/core/stream.hpp"
#include "loom/core/tensor.hpp"
#include "loom/kernels/indices.hpp"

namespace loom::kernels {

struct CrossEntropyOptions {
  std::int64_t vocab_size = -1;     // real vocabulary when logits are padded ([rows, Vp], V <= Vp); -1: all
  std::int64_t ignore_index = -1;   // targets equal to this get loss 0 and gradient 0
  IndexCheck targets = IndexCheck::checked;  // the forward's range check of the targets on a GPU
};

// losses[r] = logsumexp(logits[r, :V]) - logits[r, targets[r]]. logits: [rows, Vp] floating;
// targets: [rows] i32 or i64 in [0, V) (or ignore_index); losses: [rows] f32.
void cross_entropy_forward(const Tensor& logits, const Tensor& targets, const Tensor& losses,
                           const CrossEntropyOptions& options = {}, StreamRef stream = {});

// dlogits[r, j] = dlosses[r] * (softmax(logits[r, :V])[j] - [j == targets[r]]) for j < V, and 0
// for padded columns. dlosses: [rows] f32. dlogits may be logits (computed in place). The targets
// are trusted here (the forward pass range-checked them); the backward never indexes with them.
void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& dlosses,
                            const Tensor& dlogits, const CrossEntropyOptions& options = {}, StreamRef stream = {});

// out[0] += (sum of values, in double) / divisor, rounded to f32 once. values: [n] f32 (per-row
// losses); out: [1] f32 on the same device. Deterministic; nothing waits for the stream, so a
// training step can read the mean loss of all its micro-batches back at once.
void accumulate_mean(const Tensor& values, double divisor, const Tensor& out, StreamRef stream = {});

}  // namespace loom::kernels
