// The data-parallel equivalence every communicator backend must pass: N ranks training a small GPT
// with per-rank batch B (gradients averaged by a GradientReducer, or reduce-scattered by ZeRO)
// reach the same weights as one process training with batch N x B, after k optimizer steps; ZeRO
// also reaches DDP's weights. Each rank also trains that one-process
// reference itself and compares. Rank threads must not use Catch2 assertions, hence a result.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "loom/comm/communicator.hpp"
#include "loom/core/dtype.hpp"
#include "loom/data/batch_source.hpp"

namespace loom::test {

struct EquivalenceCase {
  std::int64_t batch_per_rank = 2;
  std::int64_t accumulation = 1;    // micro-batches per step (all but the last inside no_sync)
  int steps = 3;
  DType reduction = DType::f32;     // f32: average_hook; f16/bf16: compression_hook
  std::int64_t bucket_bytes = 8192;  // small, so the tiny model spans several buckets
  std::int64_t first_bucket_bytes = 2048;
  int zero = 0;                     // 1, 2, 3: ZeRO, also compared with DDP on the same ranks
  bool keep_gathered_for_backward = false;          // ZeRO-3's options
  bool keep_gathered_across_micro_batches = false;
  DType zero_reduction = DType::f32;                // ZeRO-2/3: bf16 reduce-scatter
  bool adamw = false;               // AdamW instead of SGD with momentum
  float max_grad_norm = 1.0f;
  std::string precision = "fp32";   // of the models (storage, GEMMs)
};

struct EquivalenceResult {
  std::string error;          // empty when the run completed
  double max_weight_diff = 0;  // max |data-parallel - reference| over every weight
  double max_update = 0;       // max |reference - initial|: the scale the difference compares with
  double first_loss_diff = 0;  // |job loss of step 1 - reference loss of step 1|
  double max_norm_rel_diff = 0;  // max over steps of |job grad norm / reference grad norm - 1|
  std::int64_t tokens_per_step = 0;
  int buckets = 0;
  int clipped_steps = 0;          // steps whose norm exceeded max_grad_norm
  double max_ddp_weight_diff = 0;  // ZeRO: max |ZeRO - DDP| over every weight, same ranks and data
  double max_ddp_loss_diff = 0;    // ZeRO: max over steps |ZeRO loss - DDP loss|
  std::int64_t gathers = 0, prefetched = 0;  // ZeRO-3: value gathers in the last step, and prefetched ones
  std::size_t peak_gathered = 0;   // ZeRO-3: most units gathered at once
};

// Rows [begin, begin + rows) of global batch p, which has `total` rows of 8 random tokens (vocabulary
// 32, every target counted) drawn from a generator seeded by p alone: every rank, and a one-process
// reference, see the same global batches.
class GlobalBatchSlice : public data::BatchSource {
 public:
  GlobalBatchSlice(std::int64_t total, std::int64_t begin, std::int64_t rows)
      : total_(total), begin_(begin), rows_(rows) {}
  data::Batch next() override;
  std::int64_t position() const override { return position_; }
  void seek(std::int64_t position) override { position_ = position; }
  std::int64_t vocab_size() const override { return 32; }

 private:
  std::int64_t total_, begin_, rows_, position_ = 0;
};

// GlobalBatchSlice whose batch number `bad` holds token 99 at position (0, 1), outside the
// vocabulary: the GPT's forward refuses it (a rank that fails in forward).
class BadBatchAt : public data::BatchSource {
 public:
  BadBatchAt(GlobalBatchSlice slice, std::int64_t bad) : slice_(std::move(slice)), bad_(bad) {}
  data::Batch next() override;
  std::int64_t position() const override { return slice_.position(); }
  void seek(std::int64_t position) override { slice_.seek(position); }
  std::int64_t vocab_size() const override { return slice_.vocab_size(); }

 private:
  GlobalBatchSlice slice_;
  std::int64_t bad_;
};

EquivalenceResult run_ddp_equivalence(comm::Communicator& comm, const EquivalenceCase& c);

}  // namespace loom::test
