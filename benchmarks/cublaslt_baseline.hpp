// gemm_bench's GPU baseline: a plain cuBLASLt row-major GEMM with one handle, one workspace and
// the algorithm chosen once, timed with CUDA events. Host-compiler safe.
#pragma once

#include <cstdint>

#include "loom/core/tensor.hpp"

namespace loom::bench {

// Median seconds of C[M,N] = op(A) op(B) (row-major CUDA tensors: A is [M,K], or [K,M] when
// trans_a; B is [K,N], or [N,K] when trans_b; tf32 selects TF32 compute for f32 inputs) over
// repeats, after one warm-up run. C holds the result afterwards.
double time_cublaslt(const Tensor& a, const Tensor& b, const Tensor& c, bool tf32, int repeats, bool trans_a = false,
                     bool trans_b = false);

}  // namespace loom::bench
