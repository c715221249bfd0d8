// Makes a CUDA device current for the guard's lifetime and restores the previous one after.
// For code compiled with CUDA (the runtime seam, the kernel launchers, the NCCL backend): like
// cuda_check.hpp it includes the CUDA runtime header, so only builds with CUDA can use it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdio>
#include <string>

#include "loom/core/cuda_check.hpp"
#include "loom/core/device.hpp"

namespace loom::detail {

class CudaDeviceGuard {
 public:
  explicit CudaDeviceGuard(int device) {
    check(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != device) check(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")");
  }
  explicit CudaDeviceGuard(Device device) : CudaDeviceGuard(device.index()) {}
  ~CudaDeviceGuard() {  // never throws: a failure to restore is reported
    int current = previous_;
    if (cudaGetDevice(&current) != cudaSuccess || current == previous_) return;
    const cudaError_t status = cudaSetDevice(previous_);
    if (status != cudaSuccess) {
      std::fprintf(stderr, "loom: restoring CUDA device %d failed: %s\n", previous_, cudaGetErrorName(status));
    }
  }
  CudaDeviceGuard(const CudaDeviceGuard&) = delete;
  CudaDeviceGuard& operator=(const CudaDeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace loom::detail
