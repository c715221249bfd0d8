#include "loom/data/prefetcher.hpp"

#include <chrono>
#include <utility>

#include "loom/core/error.hpp"

namespace loom::data {

Prefetcher::Prefetcher(std::unique_ptr<BatchSource> source, int depth) : source_(std::move(source)), depth_(depth) {
  require(source_ != nullptr, "prefetcher: no batch source");
  require(depth >= 1, "prefetcher: the depth (batches kept ready) must be at least 1, got ", depth);
  position_ = source_->position();
}

Prefetcher::~Prefetcher() { stop(); }

void Prefetcher::start() {
  stopping_ = false;
  worker_ = std::thread([this] { work(); });
}

void Prefetcher::stop() noexcept {
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void Prefetcher::work() {
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return stopping_ || static_cast<int>(ready_.size()) < depth_; });
    if (stopping_) return;
    lock.unlock();
    try {
      Batch batch = source_->next();
      lock.lock();
      ready_.push_back(std::move(batch));
    } catch (...) {
      lock.lock();
      error_ = std::current_exception();
      changed_.notify_all();
      return;  // the stream ends at the failure; seek() starts over
    }
    changed_.notify_all();
  }
}

Batch Prefetcher::next() {
  if (!worker_.joinable()) start();
  std::unique_lock lock(mutex_);
  ++stats_.batches;
  if (ready_.empty() && !error_) {
    ++stats_.waited;
    const auto begin = std::chrono::steady_clock::now();
    changed_.wait(lock, [&] { return !ready_.empty() || error_ != nullptr; });
    stats_.wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  }
  if (ready_.empty()) {
    --stats_.batches;
    std::rethrow_exception(error_);  // kept: every later call fails the same way until a seek
  }
  Batch batch = std::move(ready_.front());
  ready_.pop_front();
  ++position_;
  lock.unlock();
  changed_.notify_all();
  return batch;
}

void Prefetcher::seek(std::int64_t position) {
  stop();  // the worker may be inside source_->next(): it finishes that batch first
  ready_.clear();
  error_ = nullptr;
  try {
    source_->seek(position);
  } catch (...) {
    source_->seek(position_);  // back where the consumer is: the batches read ahead are gone
    throw;
  }
  position_ = position;
}

LoaderStats Prefetcher::take_stats() {
  const std::lock_guard lock(mutex_);
  return std::exchange(stats_, LoaderStats{});
}

}  // namespace loom::data
