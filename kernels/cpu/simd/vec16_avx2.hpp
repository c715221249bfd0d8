// Vec16 for the AVX2 variant: 16 floats as two ymm registers (lanes 0-7 and 8-15), so kernels see
// the same 16 lanes as on AVX-512 and reduce them in the same order. Included only by
// isa_avx2.cpp, inside its AVX2+FMA target region (see isa_kernels.hpp).
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/simd/avx_common.hpp"

namespace loom::kernels::cpu::avx2 {

struct Vec16 {
  static constexpr int lanes = 16;
  __m256 lo, hi;

  static Vec16 zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
  static Vec16 broadcast(float x) { return {_mm256_set1_ps(x), _mm256_set1_ps(x)}; }
  static Vec16 load(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
  // All-ones in the lanes [0, count) of an 8-lane half.
  static __m256i half_mask(int count) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(count), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  // Lanes [0, count) from p, the others +0.0f; 0 <= count <= 16. Masked lanes are not read.
  static Vec16 load_partial(const float* p, int count) {
    return {_mm256_maskload_ps(p, half_mask(count)), _mm256_maskload_ps(p + 8, half_mask(count - 8))};
  }
  // Lanes [0, count) from p, the others from fill.
  static Vec16 load_partial_or(const float* p, int count, const Vec16& fill) {
    const __m256i low = half_mask(count), high = half_mask(count - 8);
    return {_mm256_blendv_ps(fill.lo, _mm256_maskload_ps(p, low), _mm256_castsi256_ps(low)),
            _mm256_blendv_ps(fill.hi, _mm256_maskload_ps(p + 8, high), _mm256_castsi256_ps(high))};
  }
  void store(float* p) const {
    _mm256_storeu_ps(p, lo);
    _mm256_storeu_ps(p + 8, hi);
  }
  void store_partial(float* p, int count) const {
    _mm256_maskstore_ps(p, half_mask(count), lo);
    _mm256_maskstore_ps(p + 8, half_mask(count - 8), hi);
  }

  Vec16 operator+(const Vec16& b) const { return {_mm256_add_ps(lo, b.lo), _mm256_add_ps(hi, b.hi)}; }
  Vec16 operator-(const Vec16& b) const { return {_mm256_sub_ps(lo, b.lo), _mm256_sub_ps(hi, b.hi)}; }
  Vec16 operator*(const Vec16& b) const { return {_mm256_mul_ps(lo, b.lo), _mm256_mul_ps(hi, b.hi)}; }
  Vec16 operator/(const Vec16& b) const { return {_mm256_div_ps(lo, b.lo), _mm256_div_ps(hi, b.hi)}; }
  static Vec16 fma(const Vec16& a, const Vec16& b, const Vec16& c) {
    return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
  }
  static Vec16 fnma(const Vec16& a, const Vec16& b, const Vec16& c) {
    return {_mm256_fnmadd_ps(a.lo, b.lo, c.lo), _mm256_fnmadd_ps(a.hi, b.hi, c.hi)};
  }
  static Vec16 sqrt(const Vec16& a) { return {_mm256_sqrt_ps(a.lo), _mm256_sqrt_ps(a.hi)}; }
  static Vec16 max(const Vec16& a, const Vec16& b) { return {_mm256_max_ps(a.lo, b.lo), _mm256_max_ps(a.hi, b.hi)}; }
  static Vec16 min(const Vec16& a, const Vec16& b) { return {_mm256_min_ps(a.lo, b.lo), _mm256_min_ps(a.hi, b.hi)}; }
  static Vec16 round_even(const Vec16& a) {
    constexpr int mode = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    return {_mm256_round_ps(a.lo, mode), _mm256_round_ps(a.hi, mode)};
  }
  static __m256 pow2_half(__m256 n) {
    const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_castsi256_ps(bits);
  }
  static Vec16 pow2(const Vec16& n) { return {pow2_half(n.lo), pow2_half(n.hi)}; }
  template <int Predicate>
  static Vec16 select(const Vec16& a, const Vec16& b, const Vec16& x, const Vec16& y) {
    return {_mm256_blendv_ps(y.lo, x.lo, _mm256_cmp_ps(a.lo, b.lo, Predicate)),
            _mm256_blendv_ps(y.hi, x.hi, _mm256_cmp_ps(a.hi, b.hi, Predicate))};
  }
  static Vec16 select_gt(const Vec16& a, const Vec16& b, const Vec16& x, const Vec16& y) {
    return select<_CMP_GT_OQ>(a, b, x, y);
  }
  static Vec16 select_lt(const Vec16& a, const Vec16& b, const Vec16& x, const Vec16& y) {
    return select<_CMP_LT_OQ>(a, b, x, y);
  }
  static Vec16 select_nan(const Vec16& a, const Vec16& x, const Vec16& y) { return select<_CMP_UNORD_Q>(a, a, x, y); }

  // The fixed tree of portable::Vec16::reduce: lanes i and i + 8 are the two halves.
  float sum() const { return isa::reduce8<Vec16>(_mm256_add_ps(lo, hi), isa::AddLanes<Vec16>{}); }
  float max_lane() const { return isa::reduce8<Vec16>(_mm256_max_ps(lo, hi), isa::MaxLanes<Vec16>{}); }

  // The packing's transposing copy (simd/avx_common.hpp).
  template <std::int64_t R>
  static void transpose_rows(std::int64_t live, std::int64_t kc, const float* src, std::int64_t stride, float* dst) {
    isa::transpose_rows_avx<Vec16, R>(live, kc, src, stride, dst);
  }
};

}  // namespace loom::kernels::cpu::avx2
