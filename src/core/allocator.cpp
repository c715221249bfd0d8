#include "loom/core/allocator.hpp"

#include <atomic>
#include <mutex>
#include <unordered_map>
#include <new>

#include "cuda_runtime.hpp"
#include "loom/core/error.hpp"

namespace loom {

namespace {

class CpuAllocator final : public Allocator {
 public:
  Device device() const noexcept override { return Device::cpu(); }

  // Each block starts with one alignment unit that records its size (for the live count).
  void* allocate(std::size_t bytes, StreamRef stream) override {
    require(stream.device().is_cpu(), "the CPU allocator was given a stream on ", stream.device());
    if (bytes == 0) return nullptr;
    auto* base = static_cast<unsigned char*>(::operator new(bytes + cpu_alignment, std::align_val_t(cpu_alignment),
                                                            std::nothrow));
    if (base == nullptr) fail(ErrorCategory::out_of_memory, "cannot allocate ", bytes, " bytes on the CPU");
    *reinterpret_cast<std::size_t*>(base) = bytes;
    count(static_cast<std::int64_t>(bytes));
    return base + cpu_alignment;
  }

  void deallocate(void* ptr) override {
    if (ptr == nullptr) return;
    auto* base = static_cast<unsigned char*>(ptr) - cpu_alignment;
    count(-static_cast<std::int64_t>(*reinterpret_cast<std::size_t*>(base)));
    ::operator delete(base, std::align_val_t(cpu_alignment));
  }

  // Host memory from elsewhere (pinned) counts too: the statistics are the process's host memory.
  void count(std::int64_t delta) noexcept {
    const std::int64_t live = live_.fetch_add(delta) + delta;
    std::int64_t peak = peak_.load();
    while (live > peak && !peak_.compare_exchange_weak(peak, live)) {
    }
  }

  CpuMemoryStats stats() const noexcept { return {live_.load(), peak_.load()}; }
  void reset_peak() noexcept { peak_.store(live_.load()); }

 private:
  std::atomic<std::int64_t> live_{0}, peak_{0};
};

std::shared_ptr<CpuAllocator> shared_cpu_allocator() {
  static const std::shared_ptr<CpuAllocator> instance = std::make_shared<CpuAllocator>();
  return instance;
}

class CudaDirectAllocator final : public Allocator {
 public:
  explicit CudaDirectAllocator(int device_index) : device_(Device::cuda(device_index)) {
    detail::cuda_rt::require_device(device_index);
  }

  Device device() const noexcept override { return device_; }

  void* allocate(std::size_t bytes, StreamRef stream) override {
    require(stream.is_default() || stream.device() == device_, "the allocator for ", device_,
            " was given a stream on ", stream.device());
    if (bytes == 0) return nullptr;
    void* ptr = detail::cuda_rt::malloc(device_.index(), bytes);
    if (ptr == nullptr) fail(ErrorCategory::out_of_memory, "cudaMalloc of ", bytes, " bytes on ", device_);
    return ptr;
  }

  void deallocate(void* ptr) override {
    if (ptr != nullptr) detail::cuda_rt::free(device_.index(), ptr);
  }

 private:
  Device device_;
};

// Page-locked host memory (cudaHostAlloc): copies between it and the GPU run at full PCIe/NVLink
// speed and can be asynchronous. Counted in cpu_memory_stats() like any host memory.
class PinnedHostAllocator final : public Allocator {
 public:
  explicit PinnedHostAllocator(int device_index) : device_index_(device_index) {
    detail::cuda_rt::require_device(device_index);
  }

  Device device() const noexcept override { return Device::cpu(); }

  void* allocate(std::size_t bytes, StreamRef stream) override {
    require(stream.is_default() || stream.device() == Device::cuda(device_index_), "the pinned host allocator for cuda:",
            device_index_, " was given a stream on ", stream.device());
    if (bytes == 0) return nullptr;
    void* ptr = detail::cuda_rt::host_alloc(device_index_, bytes);
    if (ptr == nullptr) fail(ErrorCategory::out_of_memory, "cudaHostAlloc of ", bytes, " bytes (pinned host memory)");
    const std::lock_guard lock(mutex_);
    sizes_[ptr] = bytes;
    shared_cpu_allocator()->count(static_cast<std::int64_t>(bytes));
    return ptr;
  }

  void deallocate(void* ptr) override {
    if (ptr == nullptr) return;
    std::size_t bytes = 0;
    {
      const std::lock_guard lock(mutex_);
      const auto it = sizes_.find(ptr);
      require(it != sizes_.end(), "the pinned host allocator was given memory it did not allocate");
      bytes = it->second;
      sizes_.erase(it);
    }
    detail::cuda_rt::host_free(device_index_, ptr);
    shared_cpu_allocator()->count(-static_cast<std::int64_t>(bytes));
  }

 private:
  int device_index_;
  std::mutex mutex_;
  std::unordered_map<void*, std::size_t> sizes_;
};

}  // namespace

std::shared_ptr<Allocator> pinned_host_allocator(int device_index) {
  return std::make_shared<PinnedHostAllocator>(device_index);
}

std::shared_ptr<Allocator> cpu_allocator() { return shared_cpu_allocator(); }

CpuMemoryStats cpu_memory_stats() noexcept { return shared_cpu_allocator()->stats(); }

void reset_cpu_memory_peak() noexcept { shared_cpu_allocator()->reset_peak(); }

std::shared_ptr<Allocator> cuda_direct_allocator(int device_index) {
  return std::make_shared<CudaDirectAllocator>(device_index);
}

std::shared_ptr<Allocator> default_allocator(Device device) {
  return device.is_cpu() ? cpu_allocator() : cuda_direct_allocator(device.index());
}

}  // namespace loom
