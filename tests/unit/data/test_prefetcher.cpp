// The background loader (prefetcher.hpp): it keeps `depth` batches ready and no more, hands out
// the source's stream in order at any depth, delivers the batches made before a failure and then
// the failure, counts the batches the consumer waited for, and starts over on seek.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <thread>

#include "loom/data/prefetcher.hpp"
#include "support/tensor_checks.hpp"

using loom::ErrorCategory;
using loom::test::IsError;
namespace data = loom::data;

namespace {

// Batch p holds the number p; it fails at `fail_at` and sleeps `delay` per batch.
class Counting : public data::BatchSource {
 public:
  explicit Counting(std::atomic<std::int64_t>& made, std::int64_t fail_at = -1,
                    std::chrono::milliseconds delay = std::chrono::milliseconds(0))
      : made_(made), fail_at_(fail_at), delay_(delay) {}
  data::Batch next() override {
    std::this_thread::sleep_for(delay_);
    if (position_ == fail_at_) loom::fail(ErrorCategory::io, "disk went away at batch ", position_);
    ++made_;
    const auto value = static_cast<float>(position_++);
    return {loom::Tensor::full({1}, loom::DType::f32, value), loom::Tensor::full({1}, loom::DType::f32, value)};
  }
  std::int64_t position() const override { return position_; }
  void seek(std::int64_t position) override { position_ = position; }

 private:
  std::atomic<std::int64_t>& made_;
  std::int64_t fail_at_;
  std::chrono::milliseconds delay_;
  std::int64_t position_ = 0;
};

float number(const data::Batch& b) { return b.inputs.to_vector<float>()[0]; }

void wait_for(const std::atomic<std::int64_t>& made, std::int64_t n) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (made.load() < n && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

}  // namespace

TEST_CASE("the prefetcher keeps depth batches ready, in order", "[data]") {
  for (const int depth : {1, 2, 5}) {
    INFO("depth " << depth);
    std::atomic<std::int64_t> made{0};
    data::Prefetcher loader(std::make_unique<Counting>(made), depth);
    CHECK(made.load() == 0);  // nothing before the first next(): a resume's seek reads nothing twice
    CHECK(number(loader.next()) == 0);
    wait_for(made, 1 + depth);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    CHECK(made.load() == 1 + depth);  // the one handed out and `depth` ready, no more
    for (int p = 1; p < 12; ++p) CHECK(number(loader.next()) == static_cast<float>(p));
    CHECK(loader.position() == 12);
    loader.seek(3);
    CHECK(number(loader.next()) == 3);
    CHECK(loader.position() == 4);
  }
  std::atomic<std::int64_t> made{0};
  REQUIRE_THROWS_MATCHES(data::Prefetcher(std::make_unique<Counting>(made), 0), loom::Error,
                         IsError(ErrorCategory::invalid_argument, {"depth", "at least 1, got 0"}));
}

TEST_CASE("the prefetcher hands out the batches before a failure, then the failure", "[data]") {
  std::atomic<std::int64_t> made{0};
  data::Prefetcher loader(std::make_unique<Counting>(made, 3), 4);
  for (int p = 0; p < 3; ++p) CHECK(number(loader.next()) == static_cast<float>(p));
  REQUIRE_THROWS_MATCHES(loader.next(), loom::Error, IsError(ErrorCategory::io, {"disk went away at batch 3"}));
  REQUIRE_THROWS_MATCHES(loader.next(), loom::Error, IsError(ErrorCategory::io, {"disk went away at batch 3"}));
  loader.seek(1);  // starts over
  CHECK(number(loader.next()) == 1);
}

TEST_CASE("the prefetcher counts the batches the consumer waited for", "[data]") {
  std::atomic<std::int64_t> made{0};
  // 10 ms per batch: a consumer that takes them at once waits for each; one that computes 150 ms
  // between them finds them ready (the margin is wide for a loaded machine).
  data::Prefetcher loader(std::make_unique<Counting>(made, -1, std::chrono::milliseconds(10)), 2);
  for (int i = 0; i < 4; ++i) loader.next();
  data::LoaderStats fast = loader.take_stats();
  CHECK(fast.batches == 4);
  CHECK(fast.waited >= 3);
  CHECK(fast.wait_seconds >= 0.02);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  for (int i = 0; i < 4; ++i) {
    loader.next();
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
  }
  const data::LoaderStats slow = loader.take_stats();
  CHECK(slow.batches == 4);
  CHECK(slow.waited == 0);
  CHECK(loader.take_stats().batches == 0);  // taken: a fresh start
}
