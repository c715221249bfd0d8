// A caching allocator for device memory, in the way training frameworks do it: freed blocks are
// kept and handed out again instead of being returned to cudaMalloc/cudaFree (which synchronize
// the device). Requests are rounded up to size classes; a block is reused only by allocations on
// the stream it was last allocated on, so reuse is ordered after earlier work on that stream
// without any synchronization. When the backing allocator runs out, the cache is released and
// the request retried once before an out_of_memory Error.
//
// The stream contract (as in other frameworks' caching allocators): a block may be used by work
// on the stream it was allocated on; if other streams use it, synchronize them before freeing it.
// Blocks cached under a stream that was destroyed are only reused by a later stream that happens
// to get the same handle, after the old stream's work was enqueued: call empty_cache() after
// destroying streams whose blocks should go back to the device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "loom/core/allocator.hpp"
#include "loom/core/tensor.hpp"

namespace loom {

// Where a CachingAllocator gets its memory. Injected, so its bookkeeping is testable anywhere.
class BackingAllocator {
 public:
  virtual ~BackingAllocator() = default;
  virtual Device device() const noexcept = 0;
  virtual void* allocate(std::size_t bytes) = 0;  // nullptr when out of memory; throws otherwise
  virtual void deallocate(void* ptr) noexcept = 0;
};

// cudaMalloc/cudaFree on one device.
std::unique_ptr<BackingAllocator> make_cuda_backing_allocator(int device_index);

struct AllocatorStats {
  std::uint64_t allocated_bytes = 0;       // in blocks handed out now (size-class rounded)
  std::uint64_t reserved_bytes = 0;        // held from the backing allocator (handed out + cached)
  std::uint64_t peak_allocated_bytes = 0;  // since construction or reset_peak_stats()
  std::uint64_t peak_reserved_bytes = 0;
  std::uint64_t allocation_count = 0;      // successful allocate() calls of non-zero size
  std::uint64_t free_count = 0;            // deallocate() calls of live blocks
  std::uint64_t cache_hit_count = 0;       // allocations served from the cache
  std::uint64_t backing_allocation_count = 0;
  std::uint64_t backing_free_count = 0;
  std::uint64_t oom_retry_count = 0;       // times the cache was released to satisfy a request
  // allocated_bytes by the MemoryCategory each block was handed out under (they add up to it), and
  // each category's own peak.
  CategoryBytes allocated_by_category{};
  CategoryBytes peak_by_category{};
};

class CachingAllocator final : public Allocator {
 public:
  explicit CachingAllocator(std::unique_ptr<BackingAllocator> backing);
  ~CachingAllocator() override;  // returns the cached blocks; blocks still handed out are not touched
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // Up to 1 MiB: the next multiple of 512 bytes. Above: the next multiple of a quarter of the
  // largest power of two not above the request (so at most 25% is wasted).
  static std::size_t size_class(std::size_t bytes);

  Device device() const noexcept override { return device_; }
  void* allocate(std::size_t bytes, StreamRef stream) override;
  void deallocate(void* ptr) override;

  AllocatorStats stats() const;
  void reset_peak_stats();
  void empty_cache();  // returns every cached (not handed out) block to the backing allocator

 private:
  struct Block {
    std::size_t size;
    void* stream;
    MemoryCategory category;
  };
  using CacheKey = std::pair<void*, std::size_t>;  // (stream, size class)

  void* allocate_from_backing(std::size_t size);   // caller holds mutex_
  void release_cache();                            // caller holds mutex_

  std::unique_ptr<BackingAllocator> backing_;
  Device device_;
  mutable std::mutex mutex_;
  std::unordered_map<void*, Block> live_;
  std::map<CacheKey, std::vector<void*>> cache_;
  AllocatorStats stats_;
};

// A CachingAllocator over cudaMalloc on one device.
std::shared_ptr<CachingAllocator> make_cuda_caching_allocator(int device_index);

// One process-wide allocator per device for small per-step scratch (norm partials, overflow
// flags): a CachingAllocator on CUDA devices, so a training step allocates no device memory after
// warm-up; cpu_allocator() on the CPU. Its blocks follow the stream contract above: allocate on
// the stream that uses them, or synchronize before freeing.
std::shared_ptr<Allocator> shared_scratch_allocator(Device device);

// A zero-filled tensor from shared_scratch_allocator(device), for use on stream.
Tensor scratch_zeros(const Shape& shape, DType dtype, Device device, StreamRef stream);

}  // namespace loom
