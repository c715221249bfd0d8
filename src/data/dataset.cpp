#include "loom/data/dataset.hpp"

#include <vector>

#include "loom/core/error.hpp"

namespace loom::data {

namespace {

std::uint64_t mix(std::uint64_t z) {  // splitmix64's finaliser
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void require_rows(const char* name, const Tensor& t, std::int64_t rows) {
  require(t.defined() && t.rank() >= 1 && t.shape()[0] == rows, "dataset: examples() was asked for ", rows,
          " examples and returned ", name, " ", t, "; its first dimension must be the ", rows, " examples");
  require(t.device().is_cpu(), "dataset: examples() must return CPU tensors (Trainer's model copies them to its "
          "device), got ", name, " ", t);
}

}  // namespace

std::int64_t shuffled_index(std::int64_t k, std::int64_t n, std::uint64_t seed, std::uint64_t epoch) {
  require(n >= 1 && k >= 0 && k < n, "shuffled_index: index ", k, " is outside [0, ", n, ")");
  if (n == 1) return 0;
  int bits = 0;
  while ((std::int64_t{1} << bits) < n) ++bits;
  const int half = (bits + 1) / 2;
  const std::uint64_t mask = (std::uint64_t{1} << half) - 1;
  const std::uint64_t key = mix(seed ^ mix(epoch + 0x9e3779b97f4a7c15ull));
  // A balanced Feistel network is a bijection of [0, 4^half); walking the cycle from k until it
  // lands below n makes it a bijection of [0, n).
  std::uint64_t x = static_cast<std::uint64_t>(k);
  do {
    std::uint64_t left = x >> half, right = x & mask;
    for (std::uint64_t round = 0; round < 4; ++round) {
      const std::uint64_t next = left ^ (mix(key ^ (round << 56) ^ right) & mask);
      left = right;
      right = next;
    }
    x = (left << half) | right;
  } while (x >= static_cast<std::uint64_t>(n));
  return static_cast<std::int64_t>(x);
}

DatasetBatches::DatasetBatches(const Dataset& dataset, std::int64_t global_batch, Partition partition,
                               DatasetOrder order)
    : dataset_(dataset), size_(dataset.size()), global_batch_(global_batch), partition_(partition), order_(order) {
  partition.validate();
  require(size_ >= 1, "dataset batches: the dataset is empty (size() returned ", size_, ")");
  require(global_batch >= 1 && global_batch % partition.world == 0, "dataset batches: the global batch of ",
          global_batch, " rows must be positive and divide over the ", partition.world, " ranks");
  rows_ = global_batch / partition.world;
}

void DatasetBatches::seek(std::int64_t position) {
  require(position >= 0, "dataset batches: position must be >= 0, got ", position);
  position_ = position;
}

std::int64_t DatasetBatches::consumed_at(std::int64_t position, int) const { return position; }

std::int64_t DatasetBatches::position_at(std::int64_t consumed, int) const { return consumed; }

std::int64_t DatasetBatches::example_at(std::int64_t s) const {
  const std::int64_t epoch = s / size_, k = s % size_;
  return order_.shuffle ? shuffled_index(k, size_, order_.seed, static_cast<std::uint64_t>(epoch)) : k;
}

Batch DatasetBatches::next() {
  const std::int64_t first = position_ * global_batch_ + partition_.rank * rows_;
  std::vector<std::int64_t> indices(static_cast<std::size_t>(rows_));
  for (std::int64_t i = 0; i < rows_; ++i) indices[static_cast<std::size_t>(i)] = example_at(first + i);
  Batch batch = dataset_.examples(indices);
  require_rows("inputs", batch.inputs, rows_);
  require_rows("targets", batch.targets, rows_);
  ++position_;
  return batch;
}

}  // namespace loom::data
