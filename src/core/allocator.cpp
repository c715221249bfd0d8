#include "loom/core/allocator.hpp"

#include <new>

#include "cuda_runtime.hpp"
#include "loom/core/error.hpp"

namespace loom {

namespace {

class CpuAllocator final : public Allocator {
 public:
  Device device() const noexcept override { return Device::cpu(); }

  void* allocate(std::size_t bytes, StreamRef stream) override {
    require(stream.device().is_cpu(), "the CPU allocator was given a stream on ", stream.device());
    if (bytes == 0) return nullptr;
    void* ptr = ::operator new(bytes, std::align_val_t(cpu_alignment), std::nothrow);
    if (ptr == nullptr) fail(ErrorCategory::out_of_memory, "cannot allocate ", bytes, " bytes on the CPU");
    return ptr;
  }

  void deallocate(void* ptr) override {
    if (ptr != nullptr) ::operator delete(ptr, std::align_val_t(cpu_alignment));
  }
};

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

}  // namespace

std::shared_ptr<Allocator> cpu_allocator() {
  static const std::shared_ptr<Allocator> instance = std::make_shared<CpuAllocator>();
  return instance;
}

std::shared_ptr<Allocator> cuda_direct_allocator(int device_index) {
  return std::make_shared<CudaDirectAllocator>(device_index);
}

std::shared_ptr<Allocator> default_allocator(Device device) {
  return device.is_cpu() ? cpu_allocator() : cuda_direct_allocator(device.index());
}

}  // namespace loom
