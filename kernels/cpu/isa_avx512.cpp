// The AVX-512 variant of the CPU kernel table (dispatch.hpp): the shared kernel bodies over one zmm
// register per Vec16, and the GEMM's 14 x 32 micro-kernel (28 zmm accumulators, one broadcast of A
// and two loads of B per k for 28 FMAs). Everything the target region compiles is either a
// template over avx512::Vec16 or in namespace avx512, so no symbol is shared with another variant.
#include <cstdint>
#include <type_traits>
#include <utility>

#include "kernels/cpu/dispatch.hpp"

#if defined(__x86_64__)
// GCC 12 reports -Wuninitialized and -Wmaybe-uninitialized inside avx512fintrin.h once its
// intrinsics are inlined into a function: those that take an _mm*_undefined_*() operand (a variable
// initialised from itself, on purpose) look like reads of an uninitialised value. A false positive
// of that header; it is silenced for the header's own lines only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#pragma GCC push_options
#pragma GCC target("avx512f,avx512cd,avx512bw,avx512dq,avx512vl,avx2,fma,f16c,bmi,bmi2,lzcnt,popcnt")

#include "kernels/cpu/isa_kernels.hpp"
#include "kernels/cpu/simd/vec16_avx512.hpp"

namespace loom::kernels::cpu {

namespace avx512 {

struct Zmm {
  using reg = __m512;
  static constexpr int lanes = 16;
  static reg zero() { return _mm512_setzero_ps(); }
  static reg load(const float* p) { return _mm512_load_ps(p); }
  static reg loadu(const float* p) { return _mm512_loadu_ps(p); }
  static reg broadcast(const float* p) { return _mm512_set1_ps(*p); }
  static reg fma(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
  static reg add(reg a, reg b) { return _mm512_add_ps(a, b); }
  static void storeu(float* p, reg v) { _mm512_storeu_ps(p, v); }
  static void prefetch(const float* p) { _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0); }
};

constexpr int mr = 14, nv = 2, unroll = 4;  // rows and B vectors of the tile; depths per k-loop iteration

}  // namespace avx512

// constinit: built at compile time, so no constructor is compiled for this target.
constinit const CpuKernels avx512_kernels = isa::make_table<avx512::Vec16>(
    CpuIsa::avx512, isa::sgemm_kernels<avx512::Vec16, avx512::Zmm, avx512::mr, avx512::nv, avx512::unroll>());

}  // namespace loom::kernels::cpu

#pragma GCC pop_options

#endif  // __x86_64__
