// The caching allocator's bookkeeping, over an injected backing allocator that counts what it
// hands out and can be told to run out of memory.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "loom/core/caching_allocator.hpp"
#include "loom/core/tensor.hpp"
#include "support/tensor_checks.hpp"

using loom::AllocatorStats;
using loom::CachingAllocator;
using loom::Device;
using loom::ErrorCategory;
using loom::StreamRef;
using loom::test::IsError;

namespace {

constexpr std::size_t KiB = 1024, MiB = 1024 * 1024;

// What the fake backing allocator has handed out; shared so tests can read it after the
// CachingAllocator (which owns the backing) is gone.
struct Ledger {
  std::size_t capacity = SIZE_MAX;
  std::size_t in_use = 0;
  std::map<void*, std::size_t> blocks;
  int allocations = 0;
  int frees = 0;
};

class FakeBacking final : public loom::BackingAllocator {
 public:
  explicit FakeBacking(std::shared_ptr<Ledger> ledger) : ledger_(std::move(ledger)) {}
  Device device() const noexcept override { return Device::cpu(); }
  void* allocate(std::size_t bytes) override {
    if (ledger_->in_use + bytes > ledger_->capacity) return nullptr;
    void* ptr = std::malloc(bytes);
    ledger_->blocks[ptr] = bytes;
    ledger_->in_use += bytes;
    ++ledger_->allocations;
    return ptr;
  }
  void deallocate(void* ptr) noexcept override {
    ledger_->in_use -= ledger_->blocks.at(ptr);
    ledger_->blocks.erase(ptr);
    ++ledger_->frees;
    std::free(ptr);
  }

 private:
  std::shared_ptr<Ledger> ledger_;
};

struct Fixture {
  std::shared_ptr<Ledger> ledger = std::make_shared<Ledger>();
  std::shared_ptr<CachingAllocator> allocator =
      std::make_shared<CachingAllocator>(std::make_unique<FakeBacking>(ledger));
};

// Distinct fake stream identities on the CPU device (the allocator only uses them as keys).
StreamRef fake_stream(std::uintptr_t id) { return StreamRef(Device::cpu(), reinterpret_cast<void*>(id)); }

}  // namespace

TEST_CASE("size classes: 512-byte granules up to 1 MiB, quarter powers of two above", "[allocator]") {
  CHECK(CachingAllocator::size_class(0) == 0);
  CHECK(CachingAllocator::size_class(1) == 512);
  CHECK(CachingAllocator::size_class(512) == 512);
  CHECK(CachingAllocator::size_class(513) == 1024);
  CHECK(CachingAllocator::size_class(1000 * KiB + 1) == 1000 * KiB + 512);
  CHECK(CachingAllocator::size_class(MiB) == MiB);
  CHECK(CachingAllocator::size_class(MiB + 1) == MiB + 256 * KiB);
  CHECK(CachingAllocator::size_class(3 * MiB) == 3 * MiB);
  CHECK(CachingAllocator::size_class(3 * MiB + 1) == 3 * MiB + 512 * KiB);
  CHECK(CachingAllocator::size_class(5 * MiB + 1) == 6 * MiB);
  for (std::size_t bytes = 1; bytes < 64 * MiB; bytes = bytes * 3 + 7) {
    const std::size_t size = CachingAllocator::size_class(bytes);
    INFO(bytes);
    REQUIRE(size >= bytes);
    REQUIRE(size - bytes <= std::max<std::size_t>(511, bytes / 4));  // bounded waste
  }
}

TEST_CASE("freed blocks are reused for the same size class on the same stream", "[allocator]") {
  Fixture f;
  void* a = f.allocator->allocate(1000, {});
  AllocatorStats s = f.allocator->stats();
  CHECK(s.allocated_bytes == 1024);
  CHECK(s.reserved_bytes == 1024);
  CHECK(s.backing_allocation_count == 1);
  f.allocator->deallocate(a);
  s = f.allocator->stats();
  CHECK(s.allocated_bytes == 0);
  CHECK(s.reserved_bytes == 1024);  // cached, not returned
  CHECK(f.ledger->in_use == 1024);

  void* b = f.allocator->allocate(700, {});  // same class (1024)
  CHECK(b == a);
  s = f.allocator->stats();
  CHECK(s.cache_hit_count == 1);
  CHECK(s.backing_allocation_count == 1);
  CHECK(s.allocation_count == 2);
  CHECK(s.free_count == 1);

  void* c = f.allocator->allocate(2000, {});  // another class: a new block
  CHECK(c != b);
  CHECK(f.allocator->stats().backing_allocation_count == 2);
  f.allocator->deallocate(b);
  f.allocator->deallocate(c);
  CHECK(f.allocator->allocate(0, {}) == nullptr);
  f.allocator->deallocate(nullptr);
  CHECK(f.allocator->stats().allocation_count == 3);  // zero-byte requests are not counted
}

TEST_CASE("a block freed on one stream is not handed to another stream", "[allocator]") {
  Fixture f;
  void* on_first = f.allocator->allocate(4096, fake_stream(1));
  f.allocator->deallocate(on_first);
  void* on_second = f.allocator->allocate(4096, fake_stream(2));
  CHECK(on_second != on_first);
  CHECK(f.allocator->stats().backing_allocation_count == 2);
  void* again_first = f.allocator->allocate(4096, fake_stream(1));
  CHECK(again_first == on_first);
  f.allocator->deallocate(on_second);
  f.allocator->deallocate(again_first);
}

TEST_CASE("peak statistics track the high-water mark and reset to the current level", "[allocator]") {
  Fixture f;
  void* a = f.allocator->allocate(MiB, {});
  void* b = f.allocator->allocate(2 * MiB, {});
  f.allocator->deallocate(a);
  AllocatorStats s = f.allocator->stats();
  CHECK(s.peak_allocated_bytes == 3 * MiB);
  CHECK(s.allocated_bytes == 2 * MiB);
  CHECK(s.peak_reserved_bytes == 3 * MiB);
  f.allocator->reset_peak_stats();
  s = f.allocator->stats();
  CHECK(s.peak_allocated_bytes == 2 * MiB);
  CHECK(s.peak_reserved_bytes == 3 * MiB);  // a's block is still cached
  f.allocator->empty_cache();
  s = f.allocator->stats();
  CHECK(s.reserved_bytes == 2 * MiB);
  CHECK(s.backing_free_count == 1);
  CHECK(f.ledger->in_use == 2 * MiB);
  f.allocator->deallocate(b);
}

TEST_CASE("when the backing runs out, the cache is released and the request retried", "[allocator]") {
  Fixture f;
  f.ledger->capacity = 4 * KiB;
  void* small = f.allocator->allocate(2 * KiB, {});
  f.allocator->deallocate(small);  // cached: 2 KiB of the 4 KiB still held
  void* whole = f.allocator->allocate(4 * KiB, {});
  CHECK(whole != nullptr);
  const AllocatorStats s = f.allocator->stats();
  CHECK(s.oom_retry_count == 1);
  CHECK(s.backing_free_count == 1);
  CHECK(s.reserved_bytes == 4 * KiB);
  CHECK(f.ledger->in_use == 4 * KiB);

  CHECK_THROWS_MATCHES(f.allocator->allocate(512, {}), loom::Error,
                       IsError(ErrorCategory::out_of_memory, {"512 bytes", "cpu", "allocated 4096"}));
  f.allocator->deallocate(whole);
}

TEST_CASE("freeing a pointer twice or one never allocated is an error", "[allocator]") {
  Fixture f;
  void* a = f.allocator->allocate(100, {});
  f.allocator->deallocate(a);
  CHECK_THROWS_MATCHES(f.allocator->deallocate(a), loom::Error,
                       IsError(ErrorCategory::invalid_argument, {"already freed"}));
  int not_ours = 0;
  CHECK_THROWS_AS(f.allocator->deallocate(&not_ours), loom::Error);
  CHECK(f.allocator->stats().free_count == 1);
}

TEST_CASE("streams of another device are refused", "[allocator]") {
  Fixture f;
  CHECK_THROWS_MATCHES(f.allocator->allocate(64, StreamRef(Device::cuda(0), reinterpret_cast<void*>(1))),
                       loom::Error, IsError(ErrorCategory::invalid_argument, {"cuda:0"}));
  CHECK_THROWS_AS(CachingAllocator(nullptr), loom::Error);
}

TEST_CASE("destroying the allocator returns every cached block", "[allocator]") {
  auto ledger = std::make_shared<Ledger>();
  {
    CachingAllocator allocator(std::make_unique<FakeBacking>(ledger));
    std::vector<void*> blocks;
    for (std::size_t bytes : std::vector<std::size_t>{100, 5000, 3 * MiB, 100}) blocks.push_back(allocator.allocate(bytes, {}));
    for (void* block : blocks) allocator.deallocate(block);
    CHECK(ledger->in_use > 0);
  }
  CHECK(ledger->in_use == 0);
  CHECK(ledger->blocks.empty());
  CHECK(ledger->allocations == ledger->frees);
}

TEST_CASE("tensors return their storage to the caching allocator", "[allocator][tensor]") {
  Fixture f;
  {
    const loom::Tensor t = loom::Tensor::empty({256, 4}, loom::DType::f32, f.allocator);
    CHECK(t.device() == Device::cpu());
    CHECK(f.allocator->stats().allocated_bytes == 4096);
    const loom::Tensor view = t.slice(0, 10);
    loom::fill(view, 1.0);
  }
  CHECK(f.allocator->stats().allocated_bytes == 0);
  const loom::Tensor again = loom::Tensor::empty({1024}, loom::DType::f32, f.allocator);
  CHECK(f.allocator->stats().cache_hit_count == 1);
}

TEST_CASE("concurrent allocation and release keep the books balanced", "[allocator]") {
  Fixture f;
  auto worker = [&](std::uintptr_t stream_id) {
    std::vector<void*> held;
    for (int i = 0; i < 2000; ++i) {
      held.push_back(f.allocator->allocate(static_cast<std::size_t>(64 + (i % 7) * 1000), fake_stream(stream_id)));
      if (held.size() > 5) {
        f.allocator->deallocate(held.front());
        held.erase(held.begin());
      }
    }
    for (void* ptr : held) f.allocator->deallocate(ptr);
  };
  std::thread t1(worker, 1), t2(worker, 2);
  t1.join();
  t2.join();
  const AllocatorStats s = f.allocator->stats();
  CHECK(s.allocated_bytes == 0);
  CHECK(s.allocation_count == 4000);
  CHECK(s.free_count == 4000);
  CHECK(s.reserved_bytes == f.ledger->in_use);
  CHECK(s.cache_hit_count + s.backing_allocation_count == 4000);
}

TEST_CASE("the caching allocator counts each block under the category it was handed out in", "[allocator]") {
  using loom::MemoryCategory;
  Fixture f;
  const StreamRef s = fake_stream(1);
  void* a = nullptr;
  void* b = nullptr;
  {
    const loom::MemoryCategoryScope activations(MemoryCategory::activations);
    a = f.allocator->allocate(3 * KiB, s);
    {
      const loom::MemoryCategoryScope gradients(MemoryCategory::gradients);  // nested: the inner wins
      b = f.allocator->allocate(MiB, s);
    }
  }
  void* c = f.allocator->allocate(512, s);  // outside every scope: other
  AllocatorStats st = f.allocator->stats();
  CHECK(st.allocated_by_category[static_cast<std::size_t>(MemoryCategory::activations)] == 3 * KiB);
  CHECK(st.allocated_by_category[static_cast<std::size_t>(MemoryCategory::gradients)] == MiB);
  CHECK(st.allocated_by_category[static_cast<std::size_t>(MemoryCategory::other)] == 512);
  std::int64_t sum = 0;
  for (const std::int64_t bytes : st.allocated_by_category) sum += bytes;
  CHECK(sum == static_cast<std::int64_t>(st.allocated_bytes));
  f.allocator->deallocate(b);  // the gradients block leaves its category, its peak stays
  {
    const loom::MemoryCategoryScope optimizer(MemoryCategory::optimizer);
    b = f.allocator->allocate(MiB, s);  // the cached block, now counted as optimizer state
  }
  st = f.allocator->stats();
  CHECK(st.allocated_by_category[static_cast<std::size_t>(MemoryCategory::gradients)] == 0);
  CHECK(st.peak_by_category[static_cast<std::size_t>(MemoryCategory::gradients)] == MiB);
  CHECK(st.allocated_by_category[static_cast<std::size_t>(MemoryCategory::optimizer)] == MiB);
  for (void* p : {a, b, c}) f.allocator->deallocate(p);
  st = f.allocator->stats();
  for (const std::int64_t bytes : st.allocated_by_category) CHECK(bytes == 0);
  CHECK(loom::current_memory_category() == MemoryCategory::other);
}
