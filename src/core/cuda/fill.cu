// Fills a buffer with one element value: zeros, constants and the poison patterns tests write
// before a kernel runs. A grid-stride loop over elements of the pattern's width.
#include "fill.hpp"

#include <cuda_runtime.h>

#include <algorithm>

namespace loom::detail::cuda_rt {

namespace {

template <class Word>
__global__ void fill_kernel(Word* dst, std::int64_t count, Word value) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    dst[i] = value;
  }
}

template <class Word>
void launch(void* dst, std::int64_t count, std::uint64_t pattern, cudaStream_t stream) {
  constexpr int threads = 256;
  constexpr std::int64_t max_blocks = 65535;  // the grid-stride loop covers the rest
  const auto blocks = static_cast<unsigned>(std::min<std::int64_t>((count + threads - 1) / threads, max_blocks));
  fill_kernel<Word><<<blocks, threads, 0, stream>>>(static_cast<Word*>(dst), count, static_cast<Word>(pattern));
}

}  // namespace

void launch_fill(void* dst, std::int64_t count, std::uint64_t pattern, std::size_t element_size,
                 cudaStream_t stream) {
  if (count <= 0) return;
  switch (element_size) {
    case 1: launch<std::uint8_t>(dst, count, pattern, stream); break;
    case 2: launch<std::uint16_t>(dst, count, pattern, stream); break;
    case 4: launch<std::uint32_t>(dst, count, pattern, stream); break;
    case 8: launch<std::uint64_t>(dst, count, pattern, stream); break;
    default: break;  // the caller validated the dtype; nothing is written for an unknown width
  }
}

}  // namespace loom::detail::cuda_rt
