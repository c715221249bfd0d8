// Validation of index tensors (tokens, targets) on the device: the first out-of-range position is
// found by a kernel and reported as an invalid_argument Error. This waits for the stream.
#include "common.cuh"
#include "indices.hpp"

namespace loom::kernels::cuda {

namespace {

template <class Index>
__global__ void find_out_of_range(const Index* indices, std::int64_t n, std::int64_t limit, bool has_allowed,
                                  std::int64_t allowed, unsigned long long* first_bad) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const auto v = static_cast<std::int64_t>(indices[i]);
    if (!(has_allowed && v == allowed) && (v < 0 || v >= limit)) atomicMin(first_bad, static_cast<unsigned long long>(i));
  }
}

}  // namespace

void check_index_range(const Tensor& indices, std::int64_t limit, std::optional<std::int64_t> allowed, const char* what,
                       void* stream) {
  const std::int64_t n = indices.numel();
  if (n == 0) return;
  const DeviceGuard guard(indices.device());
  const cudaStream_t s = as_stream(stream);
  const StreamScratch scratch(sizeof(unsigned long long), s);
  unsigned long long* first_bad = scratch.as<unsigned long long>();
  check(cudaMemsetAsync(first_bad, 0xff, sizeof(unsigned long long), s), "cudaMemsetAsync");
  if (indices.dtype() == DType::i32) {
    find_out_of_range<<<grid_for(n, 256), 256, 0, s>>>(device_data<std::int32_t>(indices), n, limit, allowed.has_value(), allowed.value_or(0), first_bad);
  } else {
    find_out_of_range<<<grid_for(n, 256), 256, 0, s>>>(device_data<std::int64_t>(indices), n, limit, allowed.has_value(), allowed.value_or(0), first_bad);
  }
  check_launch(what);
  unsigned long long found = 0;
  check(cudaMemcpyAsync(&found, first_bad, sizeof(found), cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync");
  check(cudaStreamSynchronize(s), std::string(what) + ": synchronizing the index check");
  if (found == ~0ull) return;
  const auto position = static_cast<std::int64_t>(found);
  std::int64_t value = 0;
  const std::size_t size = dtype_size(indices.dtype());
  check(cudaMemcpy(&value, static_cast<const char*>(indices.raw_data()) + position * static_cast<std::int64_t>(size),
                   size, cudaMemcpyDeviceToHost),
        "cudaMemcpy");
  if (indices.dtype() == DType::i32) value = static_cast<std::int32_t>(value);
  fail(ErrorCategory::invalid_argument, what, ": index ", value, " at flat position ", position,
       " is outside [0, ", limit, ")");
}

}  // namespace loom::kernels::cuda
