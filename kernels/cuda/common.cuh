// What every CUDA kernel file shares: fp32 conversions of the storage types, dtype dispatch,
// launch sizing, a device guard and launch checking. Included by .cu files only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "loom/core/cuda_check.hpp"
#include "loom/core/cuda_device_guard.hpp"
#include "loom/core/error.hpp"
#include "loom/core/tensor.hpp"

namespace loom::kernels::cuda {

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// Calls body.template operator()<T>() with T the device storage type of dtype (f32, f16, bf16).
template <class Body>
void visit_float_dtype(DType dtype, Body&& body) {
  switch (dtype) {
    case DType::f32: body.template operator()<float>(); return;
    case DType::f16: body.template operator()<__half>(); return;
    case DType::bf16: body.template operator()<__nv_bfloat16>(); return;
    default: fail(ErrorCategory::invalid_argument, "expected a floating dtype (f32, f16, bf16), got ", dtype);
  }
}

// body.template operator()<I>() with I the C++ type of an index dtype (targets: i32 or i64).
template <class Body>
void visit_target_dtype(DType dtype, Body&& body) {
  if (dtype == DType::i32) body.template operator()<std::int32_t>();
  else body.template operator()<std::int64_t>();
}

// A tensor's elements as the device storage type T (loom::half and __half share their bits).
template <class T>
T* device_data(const Tensor& tensor) {
  return static_cast<T*>(tensor.raw_data());
}

inline cudaStream_t as_stream(void* stream) { return static_cast<cudaStream_t>(stream); }

// Blocks for a grid-stride loop over n items: enough to fill the GPU, never more than needed.
inline unsigned grid_for(std::int64_t n, int threads) {
  const std::int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(std::clamp<std::int64_t>(blocks, 1, 65535 * 16));
}


__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Sum (or max) over the block; every thread gets the result. blockDim.x is a multiple of 32.
// The reduction tree is fixed, so results are deterministic.
template <bool Max = false>
__device__ __forceinline__ float block_reduce(float v) {
  __shared__ float partial[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = Max ? warp_max(v) : warp_sum(v);
  __syncthreads();  // partial may still be read by a previous call
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < warps ? partial[lane] : (Max ? -INFINITY : 0.0f);
  return Max ? warp_max(v) : warp_sum(v);
}

// Makes the current device's default memory pool keep freed memory (release threshold: unlimited)
// instead of returning it to the driver at every synchronization, so stream-ordered scratch needs
// no new device memory once a step has run. Once per device and process.
inline void retain_pool_memory() {
  static std::mutex mutex;
  static std::set<int> done;
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  const std::lock_guard lock(mutex);
  if (done.count(device) != 0) return;
  cudaMemPool_t pool = nullptr;
  check(cudaDeviceGetDefaultMemPool(&pool, device), "cudaDeviceGetDefaultMemPool");
  std::uint64_t threshold = UINT64_MAX;
  check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold),
        "cudaMemPoolSetAttribute(release threshold)");
  done.insert(device);
}

// Lets `kernel` launch with `bytes` of dynamic shared memory (past the 48 KiB default) on `device`,
// the current one. The attribute is set once per kernel and device (again only for a larger size),
// not at every launch.
inline void allow_dynamic_shared_memory(const void* kernel, std::size_t bytes, int device, const std::string& name) {
  static std::mutex mutex;
  static std::map<std::pair<const void*, int>, std::size_t> allowed;
  const std::lock_guard lock(mutex);
  std::size_t& current = allowed[{kernel, device}];
  if (current >= bytes) return;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)),
        "cudaFuncSetAttribute(max dynamic shared memory) for " + name);
  current = bytes;
}

// Stream-ordered scratch memory (cudaMallocAsync from the device's pool), released on the same stream.
class StreamScratch {
 public:
  StreamScratch(std::size_t bytes, cudaStream_t stream) : stream_(stream) {
    retain_pool_memory();
    check(cudaMallocAsync(&data_, bytes, stream), "cudaMallocAsync(" + std::to_string(bytes) + " bytes) for scratch");
  }
  ~StreamScratch() { cudaFreeAsync(data_, stream_); }
  StreamScratch(const StreamScratch&) = delete;
  StreamScratch& operator=(const StreamScratch&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  void* data_ = nullptr;
  cudaStream_t stream_;
};

// Makes a tensor's device current while kernels are launched for it.
using DeviceGuard = detail::CudaDeviceGuard;

// Throws a cuda Error naming the kernel if its launch failed.
inline void check_launch(const char* kernel) { check(cudaGetLastError(), std::string("launch of ") + kernel); }

}  // namespace loom::kernels::cuda
