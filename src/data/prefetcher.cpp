#include "loom/data/prefetcher.hpp"

#include <utility>

#include "loom/core/error.hpp"

namespace loom::data {

Prefetcher::Prefetcher(std::unique_ptr<BatchSource> source) : source_(std::move(source)) {
  require(source_ != nullptr, "prefetcher: no batch source");
  position_ = source_->position();
}

Prefetcher::~Prefetcher() { drain(); }

void Prefetcher::drain() noexcept {
  if (!pending_.valid()) return;
  try {
    pending_.get();
  } catch (...) {  // a failed prefetch nobody asked for is dropped
  }
}

Batch Prefetcher::next() {
  if (!pending_.valid()) pending_ = std::async(std::launch::async, [this] { return source_->next(); });
  Batch batch = pending_.get();
  ++position_;
  pending_ = std::async(std::launch::async, [this] { return source_->next(); });
  return batch;
}

void Prefetcher::seek(std::int64_t position) {
  drain();
  source_->seek(position);
  position_ = position;
}

}  // namespace loom::data
