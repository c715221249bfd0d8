// Data that is not a token stream: a Dataset of examples addressed by index, which a user writes
// for their own model (docs/guide.md), and DatasetBatches, which gives each rank its slice of every
// global batch. With a global batch of G rows over N ranks, rank r's batch number p is rows
// [r G/N, (r + 1) G/N) of global batch p, so N ranks x G/N rows train exactly as one process with G
// rows (data-parallel gradients are the mean over the ranks, each the mean over its rows), and a
// checkpoint resumes at any number of ranks that divides G.
//
// The examples run as one stream over epochs: position s of the stream is example
// order(s mod size) of epoch s / size, where order is the identity or, shuffled, a permutation
// drawn from (seed, epoch) that needs no memory (a keyed Feistel network on the next power of four,
// walked until it lands inside the dataset). A global batch may straddle two epochs.
#pragma once

#include <cstdint>
#include <span>

#include "loom/data/batch_source.hpp"

namespace loom::data {

class Dataset {
 public:
  virtual ~Dataset() = default;
  // Examples in the dataset (at least 1).
  virtual std::int64_t size() const = 0;
  // The examples at `indices` (each in [0, size())), in that order, as one batch: row i of inputs
  // and targets is example indices[i]. It must depend on the indices only (resuming replays it),
  // and it is called from one thread at a time (a Prefetcher's, when there is one).
  virtual Batch examples(std::span<const std::int64_t> indices) const = 0;
};

struct DatasetOrder {
  bool shuffle = true;     // a new order every epoch
  std::uint64_t seed = 0;  // the shuffle's seed (TrainerOptions::data_seed is the natural one)
};

class DatasetBatches final : public BatchSource {
 public:
  // global_batch: rows of one global batch over all ranks; it must divide over partition.world.
  // The dataset must outlive this source.
  DatasetBatches(const Dataset& dataset, std::int64_t global_batch, Partition partition = {},
                 DatasetOrder order = {});

  // This rank's rows of global batch position(); the dataset's batch must have rows() rows.
  Batch next() override;
  std::int64_t position() const override { return position_; }
  void seek(std::int64_t position) override;
  // Global batches: the same on every rank and at any number of ranks.
  std::int64_t consumed_at(std::int64_t position, int world) const override;
  std::int64_t position_at(std::int64_t consumed, int world) const override;

  std::int64_t rows() const noexcept { return rows_; }  // per rank: global_batch / world
  std::int64_t global_batch() const noexcept { return global_batch_; }
  // The dataset index of position s of the example stream.
  std::int64_t example_at(std::int64_t s) const;

 private:
  const Dataset& dataset_;
  std::int64_t size_, global_batch_, rows_;
  Partition partition_;
  DatasetOrder order_;
  std::int64_t position_ = 0;
};

// A permutation of [0, n) keyed by (seed, epoch): shuffled_index(k, ...) for k in [0, n) visits
// every index once. O(1) memory and time per index (expected under 4 rounds of cycle walking).
std::int64_t shuffled_index(std::int64_t k, std::int64_t n, std::uint64_t seed, std::uint64_t epoch);

}  // namespace loom::data
