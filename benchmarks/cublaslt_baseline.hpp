// gemm_bench's GPU baseline: a plain cuBLASLt row-major GEMM with one handle, one workspace and
// the algorithm chosen once, timed with CUDA events. Host-compiler safe.
#pragma once

#include <cstdint>

#include "loom/core/tensor.hpp"

namespace loom::bench {

// Median seconds of C[M,N] = A[M,K] B[K,N] (row-major CUDA tensors; tf32 selects TF32 compute
// for f32 inputs) over repeats, after one warm-up run.
double time_cublaslt(const Tensor& a, const Tensor& b, const Tensor& c, bool tf32, int repeats);

}  // namespace loom::bench
