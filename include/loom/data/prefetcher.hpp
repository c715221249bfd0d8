// Prepares batches on a background thread while the steps compute: up to `depth` batches are kept
// ready ahead of the consumer. The source's next() and seek() are only ever called by one thread
// at a time (the worker's, or the caller's in seek()); consumed_at, position_at and vocab_size are
// forwarded from the caller's thread and must not depend on the source's position. Its errors reach the caller of next(), in stream order: the batches
// before the failure are handed out first. The worker starts at the first next(), so a source
// that is sought right after construction (a resume) reads nothing twice. take_stats() tells
// whether the loader keeps up: the batches the consumer had to wait for, and for how long.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>

#include "loom/data/batch_source.hpp"

namespace loom::data {

struct LoaderStats {
  std::int64_t batches = 0;  // handed out
  std::int64_t waited = 0;   // of those, the ones that were not ready when asked for
  double wait_seconds = 0;   // the time spent waiting for them
};

class Prefetcher : public BatchSource {
 public:
  // depth: batches kept ready, at least 1 (an invalid_argument Error otherwise).
  explicit Prefetcher(std::unique_ptr<BatchSource> source, int depth = 2);
  ~Prefetcher() override;  // waits for the batch the worker is making
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
  int depth() const noexcept { return depth_; }
  // The counts since the last call, and a fresh start.
  LoaderStats take_stats();

 private:
  void start();
  void stop() noexcept;
  void work();

  std::unique_ptr<BatchSource> source_;
  int depth_;
  std::int64_t position_ = 0;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Batch> ready_;
  std::exception_ptr error_;  // the source's failure, after the batches in ready_
  bool stopping_ = false;
  std::thread worker_;
  LoaderStats stats_;
};

}  // namespace loom::data
