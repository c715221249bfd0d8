#include "kernels/cuda/device_limits.hpp"

#include <cuda_runtime.h>

#include <array>
#include <mutex>

#include "loom/core/cuda_check.hpp"
#include "loom/core/device_calls.hpp"
#include "loom/core/error.hpp"

namespace loom::kernels::cuda {

namespace {

constexpr int max_devices = 64;

int attribute(cudaDeviceAttr which, int device, const char* what) {
  int value = 0;
  check(cudaDeviceGetAttribute(&value, which, device), what);
  loom::detail::count_device_call(loom::detail::DeviceCall::attribute_query);
  return value;
}

}  // namespace

const DeviceLimits& device_limits(int device) {
  static std::array<DeviceLimits, max_devices> limits;
  static std::array<std::once_flag, max_devices> queried;
  require(device >= 0 && device < max_devices, "CUDA device index ", device, " is outside [0, ", max_devices, ")");
  const auto i = static_cast<std::size_t>(device);
  std::call_once(queried[i], [&] {
    limits[i].multiprocessors = attribute(cudaDevAttrMultiProcessorCount, device, "cudaDeviceGetAttribute(SM count)");
    limits[i].shared_memory_optin = static_cast<std::size_t>(attribute(
        cudaDevAttrMaxSharedMemoryPerBlockOptin, device, "cudaDeviceGetAttribute(max shared memory per block, opt-in)"));
  });
  return limits[i];
}

}  // namespace loom::kernels::cuda
