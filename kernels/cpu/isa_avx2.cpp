// The AVX2 + FMA variant of the CPU kernel table (dispatch.hpp): the shared kernel bodies over two
// ymm registers per Vec16, and the GEMM's 6 x 16 micro-kernel (12 ymm accumulators, one broadcast
// of A and two loads of B per k for 12 FMAs). Everything the target region compiles is either a
// template over avx2::Vec16 or in namespace avx2, so no symbol is shared with another variant.
#include <cstdint>
#include <type_traits>
#include <utility>

#include "kernels/cpu/dispatch.hpp"

#if defined(__x86_64__)
#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,bmi,bmi2,lzcnt,popcnt")

#include "kernels/cpu/isa_kernels.hpp"
#include "kernels/cpu/simd/vec16_avx2.hpp"

namespace loom::kernels::cpu {

namespace avx2 {

struct Ymm {
  using reg = __m256;
  static constexpr int lanes = 8;
  static reg zero() { return _mm256_setzero_ps(); }
  static reg load(const float* p) { return _mm256_load_ps(p); }
  static reg loadu(const float* p) { return _mm256_loadu_ps(p); }
  static reg broadcast(const float* p) { return _mm256_broadcast_ss(p); }
  static reg fma(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
  static reg add(reg a, reg b) { return _mm256_add_ps(a, b); }
  static void storeu(float* p, reg v) { _mm256_storeu_ps(p, v); }
  static void prefetch(const float* p) { _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0); }
};

// Rows and B vectors of the tile, and depths per k-loop iteration: 2 where the kernel reads A
// packed or by rows in place, 1 where it reads A's columns. On a Xeon VM reporting family 6 model
// 167, 2 gave the six GEMMs (A's rows) 0.95-0.97x the time at 1 thread, and the width-128
// step's dW GEMMs (A packed) 0.93-1.01x and its step 0.99x (8 of 8 pairs at 1 thread, 4 of 4 at
// 2): the loop's pointer and counter updates are shared by twice the FMAs. A's columns at 2 made
// that step 1.7% slower (3 of 4 pairs, while they still ran its dW GEMMs; they now run the
// causal attention's products by P^T and dS^T, not measured again); 4 everywhere measured 2%
// slower, earlier.
constexpr int mr = 6, nv = 2, unroll = 2, unroll_columns = 1;

}  // namespace avx2

// constinit: built at compile time, so no constructor is compiled for this target.
constinit const CpuKernels avx2_kernels = isa::make_table<avx2::Vec16>(
    CpuIsa::avx2, isa::sgemm_kernels<avx2::Vec16, avx2::Ymm, avx2::mr, avx2::nv, avx2::unroll, avx2::unroll_columns>());

}  // namespace loom::kernels::cpu

#pragma GCC pop_options

#endif  // __x86_64__
