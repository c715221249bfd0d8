// What loom's kernels ask of a GPU at every launch (how many SMs, how much shared memory a block
// may opt into), queried from the driver once per device and kept: a cudaDeviceGetAttribute per
// GEMM is host time a small GEMM cannot afford. Host-compiler safe.
#pragma once

#include <cstddef>

namespace loom::kernels::cuda {

struct DeviceLimits {
  int multiprocessors = 0;
  std::size_t shared_memory_optin = 0;  // per block: 227 KiB on sm_90, 163 KiB on sm_80, 99 KiB on sm_86/89
};

// The limits of CUDA device `device` (its index), queried on first use. Thread-safe.
const DeviceLimits& device_limits(int device);

}  // namespace loom::kernels::cuda
