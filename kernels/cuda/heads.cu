// split_heads / merge_heads on CUDA: one thread per 16 bytes where every row of hs elements is
// 16-byte aligned in both layouts (the usual case), per element (of any size) otherwise; threads follow the
// head-major order, so the [K, B, NH, T, hs] side is read or written contiguously.
#include <cstdint>

#include "common.cuh"
#include "training.hpp"

namespace loom::kernels::cuda {

namespace {

struct alignas(16) Bytes16 {
  unsigned v[4];
};

struct HeadDims {
  std::int64_t groups, batch, heads, steps, row_units;  // row_units: units per row of hs elements
};

template <class Unit>
__global__ void permute_heads_kernel(Unit* x, Unit* head_major, HeadDims d, std::int64_t units, bool to_heads) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t u = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; u < units; u += stride) {
    const std::int64_t c = u % d.row_units;
    std::int64_t rest = u / d.row_units;
    const std::int64_t t = rest % d.steps;
    rest /= d.steps;
    const std::int64_t h = rest % d.heads;
    rest /= d.heads;
    const std::int64_t b = rest % d.batch, k = rest / d.batch;
    const std::int64_t xu = ((b * d.steps + t) * d.groups + k) * d.heads * d.row_units + h * d.row_units + c;
    if (to_heads) head_major[u] = x[xu];
    else x[xu] = head_major[u];
  }
}

template <class Unit>
void launch(const Tensor& x, const Tensor& heads, HeadDims d, bool to_heads, cudaStream_t stream) {
  const std::int64_t units = d.groups * d.batch * d.heads * d.steps * d.row_units;
  constexpr int threads = 256;
  permute_heads_kernel<Unit><<<grid_for(units, threads), threads, 0, stream>>>(
      static_cast<Unit*>(x.raw_data()), static_cast<Unit*>(heads.raw_data()), d, units, to_heads);
}

}  // namespace

void permute_heads(const Tensor& x, const Tensor& heads, std::int64_t num_heads, bool to_heads, void* stream) {
  const DeviceGuard guard(x.device());
  const std::int64_t element = static_cast<std::int64_t>(dtype_size(x.dtype()));
  const std::int64_t row_bytes = heads.size(4) * element;
  const bool packed = row_bytes % 16 == 0 && reinterpret_cast<std::uintptr_t>(x.raw_data()) % 16 == 0 &&
                      reinterpret_cast<std::uintptr_t>(heads.raw_data()) % 16 == 0;
  HeadDims d{heads.size(0), heads.size(1), num_heads, heads.size(3), 0};
  const cudaStream_t s = as_stream(stream);
  d.row_units = packed ? row_bytes / 16 : heads.size(4);
  if (packed) launch<Bytes16>(x, heads, d, to_heads, s);
  else if (element == 1) launch<std::uint8_t>(x, heads, d, to_heads, s);
  else if (element == 2) launch<std::uint16_t>(x, heads, d, to_heads, s);
  else if (element == 4) launch<std::uint32_t>(x, heads, d, to_heads, s);
  else launch<std::uint64_t>(x, heads, d, to_heads, s);
  check_launch("permute_heads");
}

}  // namespace loom::kernels::cuda
