// The training benchmarks' data: one random-token batch served again and again (a step's cost does
// not depend on the data).
#pragma once

#include <cstdint>
#include <random>
#include <utility>

#include "loom/data/batch_source.hpp"

namespace loom::bench {

inline data::Batch random_batch(std::int64_t batch, std::int64_t steps, std::int64_t vocab, std::mt19937& rng) {
  std::uniform_int_distribution<std::int32_t> dist(0, static_cast<std::int32_t>(vocab - 1));
  data::Batch b{Tensor::empty({batch, steps}, DType::i32), Tensor::empty({batch, steps}, DType::i32)};
  for (std::int32_t& v : b.inputs.span<std::int32_t>()) v = dist(rng);
  for (std::int32_t& v : b.targets.span<std::int32_t>()) v = dist(rng);
  return b;
}

class RepeatBatch : public data::BatchSource {
 public:
  RepeatBatch(data::Batch batch, std::int64_t vocab) : batch_(std::move(batch)), vocab_(vocab) {}
  data::Batch next() override {
    ++position_;
    return batch_;
  }
  std::int64_t position() const override { return position_; }
  void seek(std::int64_t p) override { position_ = p; }
  std::int64_t vocab_size() const override { return vocab_; }

 private:
  data::Batch batch_;
  std::int64_t vocab_, position_ = 0;
};

}  // namespace loom::bench
