// Device memory allocators. Tensors hold a shared_ptr to the allocator that made their storage,
// so an allocator lives as long as any memory it handed out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "loom/core/device.hpp"
#include "loom/core/memory_category.hpp"
#include "loom/core/stream.hpp"

namespace loom {

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual Device device() const noexcept = 0;
  // Memory usable by work on stream. Zero bytes gives nullptr. Throws an out_of_memory Error.
  virtual void* allocate(std::size_t bytes, StreamRef stream) = 0;
  // Returns memory from allocate(); nullptr is ignored. Throws invalid_argument for a pointer
  // this allocator did not hand out.
  virtual void deallocate(void* ptr) = 0;
};

// Alignment of every CPU allocation: a cache line, and enough for any SIMD load.
inline constexpr std::size_t cpu_alignment = 64;

// The CPU allocator (aligned operator new). One shared instance serves everyone and counts the
// bytes it has handed out, as the CUDA caching allocator does on the GPU (the memory a model
// state needs is measured with it).
std::shared_ptr<Allocator> cpu_allocator();

struct CpuMemoryStats {
  std::int64_t live_bytes = 0;  // allocated and not yet released, over the whole process
  std::int64_t peak_bytes = 0;  // the most live bytes since the start or reset_cpu_memory_peak()
  // The same by MemoryCategory (index: the enum's value). The live bytes add up to live_bytes;
  // each category's peak is its own (they need not have peaked together).
  CategoryBytes live_by_category{};
  CategoryBytes peak_by_category{};
};
CpuMemoryStats cpu_memory_stats() noexcept;
void reset_cpu_memory_peak() noexcept;  // peak := live

// A cap on the CPU allocator's live bytes (0: none), read from LOOM_MEMORY_LIMIT at start-up
// ("512M", "2G", "1073741824"; K, M, G and T are powers of 1024): an allocation that would take
// the live bytes over it throws an out_of_memory Error naming its category, the limit and the
// live bytes by category, instead of the process being killed. It stands in for a device's memory
// when sizing a run on the CPU (train_gpt --batch auto). Checked when each request is made, so
// threads allocating at once can pass it together by their last requests.
void set_cpu_memory_limit(std::int64_t bytes);
std::int64_t cpu_memory_limit() noexcept;
// "512M" and the like as above; an invalid_argument Error naming `what` otherwise.
std::int64_t parse_memory_size(const std::string& text, const std::string& what);

// Page-locked host memory for copies to and from GPU device_index (cudaHostAlloc, no caching):
// tensors on Device::cpu(), counted in cpu_memory_stats(). A cuda Error without CUDA.
std::shared_ptr<Allocator> pinned_host_allocator(int device_index);

// Plain cudaMalloc/cudaFree on one device, without caching.
std::shared_ptr<Allocator> cuda_direct_allocator(int device_index);

// The allocator Tensor::empty uses when given only a device: cpu_allocator() or
// cuda_direct_allocator(). Long-running code should use a CachingAllocator instead.
std::shared_ptr<Allocator> default_allocator(Device device);

}  // namespace loom
