// The AVX2 + FMA micro-kernel of the CPU GEMM: a 6 x 16 block of C in 12 ymm accumulators, one
// broadcast of A and two loads of B per k, 12 FMAs. Compiled for AVX2/FMA by function attribute, so
// the library still runs on CPUs without them (best_sgemm_micro_kernel() checks at run time).
#include "kernels/cpu/sgemm.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

namespace loom::kernels::cpu::detail {

static_assert(sgemm_mr == 6 && sgemm_nr == 16, "the AVX2 micro-kernel is written for 6 x 16");

bool cpu_has_avx2_fma() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }

__attribute__((target("avx2,fma"))) void sgemm_micro_avx2_fma(std::int64_t kc, const float* packed_a,
                                                               const float* packed_b, float* c, std::int64_t ldc,
                                                               bool accumulate) {
  // Bring C towards L1 while the k loop runs; it is only touched at the end.
  for (int i = 0; i < 6; ++i) {
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + 15), _MM_HINT_T0);
  }
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
  __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  const float* pa = packed_a;
  const float* pb = packed_b;
#pragma GCC unroll 4
  for (std::int64_t k = 0; k < kc; ++k) {
    _mm_prefetch(reinterpret_cast<const char*>(pb + 8 * sgemm_nr), _MM_HINT_T0);
    const __m256 b0 = _mm256_loadu_ps(pb), b1 = _mm256_loadu_ps(pb + 8);
    __m256 a = _mm256_broadcast_ss(pa + 0);
    c00 = _mm256_fmadd_ps(a, b0, c00);
    c01 = _mm256_fmadd_ps(a, b1, c01);
    a = _mm256_broadcast_ss(pa + 1);
    c10 = _mm256_fmadd_ps(a, b0, c10);
    c11 = _mm256_fmadd_ps(a, b1, c11);
    a = _mm256_broadcast_ss(pa + 2);
    c20 = _mm256_fmadd_ps(a, b0, c20);
    c21 = _mm256_fmadd_ps(a, b1, c21);
    a = _mm256_broadcast_ss(pa + 3);
    c30 = _mm256_fmadd_ps(a, b0, c30);
    c31 = _mm256_fmadd_ps(a, b1, c31);
    a = _mm256_broadcast_ss(pa + 4);
    c40 = _mm256_fmadd_ps(a, b0, c40);
    c41 = _mm256_fmadd_ps(a, b1, c41);
    a = _mm256_broadcast_ss(pa + 5);
    c50 = _mm256_fmadd_ps(a, b0, c50);
    c51 = _mm256_fmadd_ps(a, b1, c51);
    pa += sgemm_mr;
    pb += sgemm_nr;
  }
  const __m256 rows[6][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
  for (int i = 0; i < 6; ++i) {
    float* row = c + i * ldc;
    __m256 left = rows[i][0], right = rows[i][1];
    if (accumulate) {
      left = _mm256_add_ps(left, _mm256_loadu_ps(row));
      right = _mm256_add_ps(right, _mm256_loadu_ps(row + 8));
    }
    _mm256_storeu_ps(row, left);
    _mm256_storeu_ps(row + 8, right);
  }
}

}  // namespace loom::kernels::cpu::detail

#else  // not x86: only the portable micro-kernel exists

namespace loom::kernels::cpu::detail {

bool cpu_has_avx2_fma() { return false; }

void sgemm_micro_avx2_fma(std::int64_t kc, const float* packed_a, const float* packed_b, float* c, std::int64_t ldc,
                          bool accumulate) {
  sgemm_micro_portable(kc, packed_a, packed_b, c, ldc, accumulate);
}

}  // namespace loom::kernels::cpu::detail

#endif
