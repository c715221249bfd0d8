#include "loom/core/caching_allocator.hpp"

#include <algorithm>
#include <bit>

#include "cuda_runtime.hpp"
#include "loom/core/error.hpp"
#include "loom/core/tensor_ops.hpp"

namespace loom {

namespace {

constexpr std::size_t small_limit = std::size_t{1} << 20;  // 1 MiB
constexpr std::size_t small_granule = 512;

class CudaBackingAllocator final : public BackingAllocator {
 public:
  explicit CudaBackingAllocator(int device_index) : device_(Device::cuda(device_index)) {
    detail::cuda_rt::require_device(device_index);
  }
  Device device() const noexcept override { return device_; }
  void* allocate(std::size_t bytes) override { return detail::cuda_rt::malloc(device_.index(), bytes); }
  void deallocate(void* ptr) noexcept override { detail::cuda_rt::free(device_.index(), ptr); }

 private:
  Device device_;
};

}  // namespace

std::unique_ptr<BackingAllocator> make_cuda_backing_allocator(int device_index) {
  return std::make_unique<CudaBackingAllocator>(device_index);
}

std::shared_ptr<CachingAllocator> make_cuda_caching_allocator(int device_index) {
  return std::make_shared<CachingAllocator>(make_cuda_backing_allocator(device_index));
}

CachingAllocator::CachingAllocator(std::unique_ptr<BackingAllocator> backing)
    : backing_(std::move(backing)) {
  require(backing_ != nullptr, "CachingAllocator needs a backing allocator, got null");
  device_ = backing_->device();
}

CachingAllocator::~CachingAllocator() {
  std::lock_guard lock(mutex_);
  release_cache();
}

std::size_t CachingAllocator::size_class(std::size_t bytes) {
  if (bytes == 0) return 0;
  if (bytes <= small_limit) return (bytes + small_granule - 1) / small_granule * small_granule;
  const std::size_t step = std::bit_floor(bytes) / 4;
  if (bytes > SIZE_MAX - step) fail(ErrorCategory::out_of_memory, "an allocation of ", bytes, " bytes is impossible");
  return (bytes + step - 1) / step * step;
}

void* CachingAllocator::allocate(std::size_t bytes, StreamRef stream) {
  require(stream.is_default() || stream.device() == device_, "the caching allocator for ", device_,
          " was given a stream on ", stream.device());
  if (bytes == 0) return nullptr;
  const std::size_t size = size_class(bytes);
  std::lock_guard lock(mutex_);

  void* ptr = nullptr;
  const auto cached = cache_.find(CacheKey(stream.native_handle(), size));
  if (cached != cache_.end()) {
    ptr = cached->second.back();
    cached->second.pop_back();
    if (cached->second.empty()) cache_.erase(cached);
    ++stats_.cache_hit_count;
  } else {
    ptr = allocate_from_backing(size);
  }
  const MemoryCategory category = current_memory_category();
  try {
    live_.emplace(ptr, Block{size, stream.native_handle(), category});
  } catch (...) {
    cache_[CacheKey(stream.native_handle(), size)].push_back(ptr);  // keep the books whole
    throw;
  }
  ++stats_.allocation_count;
  stats_.allocated_bytes += size;
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  const auto c = static_cast<std::size_t>(category);
  stats_.allocated_by_category[c] += static_cast<std::int64_t>(size);
  stats_.peak_by_category[c] = std::max(stats_.peak_by_category[c], stats_.allocated_by_category[c]);
  return ptr;
}

void* CachingAllocator::allocate_from_backing(std::size_t size) {
  void* ptr = backing_->allocate(size);
  if (ptr == nullptr && !cache_.empty()) {
    ++stats_.oom_retry_count;
    release_cache();
    ptr = backing_->allocate(size);
  }
  if (ptr == nullptr) {
    fail(ErrorCategory::out_of_memory, "cannot allocate ", size, " bytes on ", device_,
         " (allocated ", stats_.allocated_bytes, " bytes, reserved ", stats_.reserved_bytes,
         " bytes, cache already released)");
  }
  ++stats_.backing_allocation_count;
  stats_.reserved_bytes += size;
  stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
  return ptr;
}

void CachingAllocator::deallocate(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard lock(mutex_);
  const auto live = live_.find(ptr);
  require(live != live_.end(), "caching allocator for ", device_, " asked to free ", ptr,
          ", which it did not allocate or which was already freed");
  const Block block = live->second;
  cache_[CacheKey(block.stream, block.size)].push_back(ptr);  // may throw: nothing changed yet
  live_.erase(live);
  ++stats_.free_count;
  stats_.allocated_bytes -= block.size;
  stats_.allocated_by_category[static_cast<std::size_t>(block.category)] -= static_cast<std::int64_t>(block.size);
}

void CachingAllocator::release_cache() {
  for (auto& [key, blocks] : cache_) {
    for (void* ptr : blocks) {
      backing_->deallocate(ptr);
      ++stats_.backing_free_count;
      stats_.reserved_bytes -= key.second;
    }
  }
  cache_.clear();
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void CachingAllocator::reset_peak_stats() {
  std::lock_guard lock(mutex_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
  stats_.peak_by_category = stats_.allocated_by_category;
}

void CachingAllocator::empty_cache() {
  std::lock_guard lock(mutex_);
  release_cache();
}

std::shared_ptr<Allocator> shared_scratch_allocator(Device device) {
  if (device.is_cpu()) return cpu_allocator();
  // Never destroyed: freeing device memory during static destruction, after the CUDA runtime may
  // have shut down, would only produce errors.
  static std::mutex mutex;
  static auto* allocators = new std::map<int, std::shared_ptr<CachingAllocator>>();
  const std::lock_guard lock(mutex);
  std::shared_ptr<CachingAllocator>& allocator = (*allocators)[device.index()];
  if (!allocator) allocator = make_cuda_caching_allocator(device.index());
  return allocator;
}

Tensor scratch_zeros(const Shape& shape, DType dtype, Device device, StreamRef stream) {
  const Tensor t = Tensor::empty(shape, dtype, shared_scratch_allocator(device), stream);
  fill(t, 0.0, stream);
  return t;
}

}  // namespace loom
