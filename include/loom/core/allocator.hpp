// Device memory allocators. Tensors hold a shared_ptr to the allocator that made their storage,
// so an allocator lives as long as any memory it handed out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

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

// Page-locked host memory for copies to and from GPU device_index (cudaHostAlloc, no caching):
// tensors on Device::cpu(), counted in cpu_memory_stats(). A cuda Error without CUDA.
std::shared_ptr<Allocator> pinned_host_allocator(int device_index);

// Plain cudaMalloc/cudaFree on one device, without caching.
std::shared_ptr<Allocator> cuda_direct_allocator(int device_index);

// The allocator Tensor::empty uses when given only a device: cpu_allocator() or
// cuda_direct_allocator(). Long-running code should use a CachingAllocator instead.
std::shared_ptr<Allocator> default_allocator(Device device);

}  // namespace loom
