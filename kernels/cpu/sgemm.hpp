// loom's CPU fp32 GEMM engine: C = op(A) op(B) for strided operands, in the style of BLIS/GotoBLAS.
// B is packed once per (KC x NC) block into NR-column slivers shared by all threads; each thread
// packs its own MC x KC blocks of A into MR-row slivers and runs an MR x NR register-blocked
// micro-kernel over them. Threads split the rows of C, so every element of C is written by one
// thread with a fixed summation order (bit-identical results for any thread count).
#pragma once

#include <cstdint>

namespace loom::kernels::cpu {

// Element (i, j) of a logical matrix is data[i * row_stride + j * col_stride]; a transpose is
// only a swap of the two strides.
struct SgemmOperand {
  const float* data = nullptr;
  std::int64_t row_stride = 0;
  std::int64_t col_stride = 0;
};

// The micro-kernels; avx2_fma is used when the CPU has it, portable is plain C++.
enum class SgemmMicroKernel { portable, avx2_fma };

SgemmMicroKernel best_sgemm_micro_kernel();

// C[m x n] (row-major, leading dimension ldc) = A[m x k] B[k x n], or C += A B when accumulate,
// fp32 accumulation, k summed in ascending blocks. Uses up to max_threads OpenMP threads (1 runs in
// the calling thread).
void sgemm(std::int64_t m, std::int64_t n, std::int64_t k, SgemmOperand a, SgemmOperand b, float* c,
           std::int64_t ldc, int max_threads, SgemmMicroKernel micro_kernel = best_sgemm_micro_kernel(),
           bool accumulate = false);

namespace detail {
inline constexpr std::int64_t sgemm_mr = 6;   // rows of C per micro-kernel call
inline constexpr std::int64_t sgemm_nr = 16;  // columns of C per micro-kernel call (two AVX registers)

// c[MR x NR] (ldc) = (accumulate ? c : 0) + sum over kc of packed_a[MR] x packed_b[NR].
void sgemm_micro_avx2_fma(std::int64_t kc, const float* packed_a, const float* packed_b, float* c,
                          std::int64_t ldc, bool accumulate);
void sgemm_micro_portable(std::int64_t kc, const float* packed_a, const float* packed_b, float* c,
                          std::int64_t ldc, bool accumulate);
bool cpu_has_avx2_fma();
}  // namespace detail

}  // namespace loom::kernels::cpu
