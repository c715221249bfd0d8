// Launcher for the fill kernel (src/core/cuda/fill.cu): core fills memory itself, below the kernels. Host-compiler safe: no CUDA headers.
#pragma once

#include <cstddef>
#include <cstdint>

typedef struct CUstream_st* cudaStream_t;

namespace loom::detail::cuda_rt {

// Writes count copies of the low element_size bytes of pattern (element_size 1, 2, 4 or 8) to
// dst, on stream. Launch errors are left for cudaGetLastError().
void launch_fill(void* dst, std::int64_t count, std::uint64_t pattern, std::size_t element_size,
                 cudaStream_t stream);

}  // namespace loom::detail::cuda_rt
