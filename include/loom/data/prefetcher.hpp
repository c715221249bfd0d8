// Prepares the next batch on a background thread while the current step computes. The source is
// only ever used by one thread at a time; its errors reach the caller of next().
#pragma once

#include <future>
#include <memory>

#include "loom/data/batch_source.hpp"

namespace loom::data {

class Prefetcher : public BatchSource {
 public:
  explicit Prefetcher(std::unique_ptr<BatchSource> source);
  ~Prefetcher() override;  // waits for a batch in flight
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  Batch next() override;
  std::int64_t position() const override { return position_; }  // batches handed out
  void seek(std::int64_t position) override;
  std::int64_t consumed_at(std::int64_t position, int world) const override {
    return source_->consumed_at(position, world);
  }
  std::int64_t position_at(std::int64_t consumed, int world) const override {
    return source_->position_at(consumed, world);
  }
  std::int64_t vocab_size() const override { return source_->vocab_size(); }

 private:
  void drain() noexcept;
  std::unique_ptr<BatchSource> source_;
  std::future<Batch> pending_;
  std::int64_t position_ = 0;
};

}  // namespace loom::data
