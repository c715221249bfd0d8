// Counts of the host calls that cost far more than a kernel launch: device allocations and frees
// (cudaMalloc/cudaFree synchronize the device), cuBLASLt handle creations and algorithm searches,
// and device attribute queries (loom's kernels keep what they need per device).
// Process-wide, from the start. After warm-up a training step makes none of them; the CUDA tests
// check that with these counters. (Stream-ordered scratch from cudaMallocAsync is served by the
// device's memory pool, which keeps its memory, and is not counted.)
#pragma once

#include <cstdint>

namespace loom {

struct DeviceCallCounts {
  std::uint64_t device_allocations = 0;       // cudaMalloc
  std::uint64_t device_frees = 0;             // cudaFree
  std::uint64_t blas_handles = 0;             // cublasLtCreate
  std::uint64_t blas_algorithm_searches = 0;  // cublasLtMatmulAlgoGetHeuristic
  std::uint64_t attribute_queries = 0;        // cudaDeviceGetAttribute
};

DeviceCallCounts device_call_counts() noexcept;

namespace detail {
enum class DeviceCall { allocation, free, blas_handle, blas_algorithm_search, attribute_query };
void count_device_call(DeviceCall call) noexcept;
}  // namespace detail

}  // namespace loom
