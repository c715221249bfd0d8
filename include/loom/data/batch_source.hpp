// Where training batches come from. A source is deterministic: batch number p of rank r depends
// only on its construction arguments, p and r, so seeking to a saved position resumes the exact
// data stream, and the ranks of a data-parallel job read disjoint parts of it.
#pragma once

#include <cstdint>

#include "loom/core/tensor.hpp"

namespace loom::data {

// One micro-batch: two named tensors on the CPU, of whatever dtype and shape the model defines,
// whose first dimension is the batch (the examples). Trainer hands them to
// model::Model::forward(inputs, targets). A language model's are tokens [B, T] i32 and next-token
// targets [B, T] i32 (-1: no loss at that position); a regression's, features [B, n] f32 and
// values [B, m] f32; a classifier's, features and class indices [B] i32.
struct Batch {
  Tensor inputs;
  Tensor targets;
};

// This process's share of the data: rank `rank` of `world`. What a share is depends on the source:
// TokenBatches and AdditionTask give rank r the whole global batches r, r + world, ...;
// DatasetBatches gives it rows [r B, (r + 1) B) of every global batch of world x B rows.
struct Partition {
  int rank = 0;
  int world = 1;
  void validate() const;
};

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual Batch next() = 0;
  // Batches this rank has taken so far.
  virtual std::int64_t position() const = 0;
  virtual void seek(std::int64_t position) = 0;

  // What a checkpoint stores: the job's progress through the data after every rank of a job of
  // `world` ranks has taken `position` batches, and back (a checkpoint may resume at another
  // number of ranks). By default the ranks take interleaved whole batches, so the job has
  // consumed position x world, and resuming needs a count that divides over the new ranks;
  // DatasetBatches counts global batches, which resume at any number of ranks.
  virtual std::int64_t consumed_at(std::int64_t position, int world) const;
  virtual std::int64_t position_at(std::int64_t consumed, int world) const;

  // The vocabulary of a token stream, for a model to check its own against; 0: not tokens.
  virtual std::int64_t vocab_size() const { return 0; }
};

}  // namespace loom::data
