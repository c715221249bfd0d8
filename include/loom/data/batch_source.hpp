// Where training batches come from. A source is deterministic: batch number p of rank r depends
// only on its construction arguments, p and r, so seeking to a saved position resumes the exact
// data stream, and the ranks of a data-parallel job read disjoint parts of it.
#pragma once

#include <cstdint>

#include "loom/core/tensor.hpp"

namespace loom::data {

// tokens and targets: [B, T] i32 on the CPU. A target of -1 marks a position without loss.
struct Batch {
  Tensor tokens;
  Tensor targets;
};

// This process's share of the data: global batch g of the job is batch g / world of rank g % world.
struct Partition {
  int rank = 0;
  int world = 1;
  void validate() const;
};

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual Batch next() = 0;
  // Batches this rank has taken so far (what a checkpoint stores).
  virtual std::int64_t position() const = 0;
  virtual void seek(std::int64_t position) = 0;
  virtual std::int64_t vocab_size() const = 0;
};

}  // namespace loom::data
