// Vec16 for the AVX-512 variant: 16 floats in one zmm register, tails through lane masks.
// Included only by isa_avx512.cpp, inside its AVX-512 target region (see isa_kernels.hpp).
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/simd/avx_common.hpp"

namespace loom::kernels::cpu::avx512 {

struct Vec16 {
  static constexpr int lanes = 16;
  __m512 v;

  static Vec16 zero() { return {_mm512_setzero_ps()}; }
  static Vec16 broadcast(float x) { return {_mm512_set1_ps(x)}; }
  static Vec16 load(const float* p) { return {_mm512_loadu_ps(p)}; }
  static __mmask16 mask(int count) { return static_cast<__mmask16>((1u << count) - 1u); }
  // Lanes [0, count) from p, the others +0.0f; 0 <= count <= 16. Masked lanes are not read.
  static Vec16 load_partial(const float* p, int count) { return {_mm512_maskz_loadu_ps(mask(count), p)}; }
  // Lanes [0, count) from p, the others from fill.
  static Vec16 load_partial_or(const float* p, int count, const Vec16& fill) {
    return {_mm512_mask_loadu_ps(fill.v, mask(count), p)};
  }
  void store(float* p) const { _mm512_storeu_ps(p, v); }
  void store_partial(float* p, int count) const { _mm512_mask_storeu_ps(p, mask(count), v); }

  Vec16 operator+(const Vec16& b) const { return {_mm512_add_ps(v, b.v)}; }
  Vec16 operator-(const Vec16& b) const { return {_mm512_sub_ps(v, b.v)}; }
  Vec16 operator*(const Vec16& b) const { return {_mm512_mul_ps(v, b.v)}; }
  Vec16 operator/(const Vec16& b) const { return {_mm512_div_ps(v, b.v)}; }
  static Vec16 fma(const Vec16& a, const Vec16& b, const Vec16& c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }
  static Vec16 fnma(const Vec16& a, const Vec16& b, const Vec16& c) { return {_mm512_fnmadd_ps(a.v, b.v, c.v)}; }
  static Vec16 sqrt(const Vec16& a) { return {_mm512_sqrt_ps(a.v)}; }
  static Vec16 max(const Vec16& a, const Vec16& b) { return {_mm512_max_ps(a.v, b.v)}; }
  static Vec16 min(const Vec16& a, const Vec16& b) { return {_mm512_min_ps(a.v, b.v)}; }
  static Vec16 round_even(const Vec16& a) {
    return {_mm512_roundscale_ps(a.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)};
  }
  static Vec16 pow2(const Vec16& n) {
    const __m512i bits = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n.v), _mm512_set1_epi32(127)), 23);
    return {_mm512_castsi512_ps(bits)};
  }
  static Vec16 select_gt(const Vec16& a, const Vec16& b, const Vec16& x, const Vec16& y) {
    return {_mm512_mask_blend_ps(_mm512_cmp_ps_mask(a.v, b.v, _CMP_GT_OQ), y.v, x.v)};
  }
  static Vec16 select_lt(const Vec16& a, const Vec16& b, const Vec16& x, const Vec16& y) {
    return {_mm512_mask_blend_ps(_mm512_cmp_ps_mask(a.v, b.v, _CMP_LT_OQ), y.v, x.v)};
  }
  static Vec16 select_nan(const Vec16& a, const Vec16& x, const Vec16& y) {
    return {_mm512_mask_blend_ps(_mm512_cmp_ps_mask(a.v, a.v, _CMP_UNORD_Q), y.v, x.v)};
  }

  // The fixed tree of portable::Vec16::reduce: lanes 0-7 with 8-15 first.
  float sum() const {
    return isa::reduce8<Vec16>(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)),
                               isa::AddLanes<Vec16>{});
  }
  float max_lane() const {
    return isa::reduce8<Vec16>(_mm256_max_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)),
                               isa::MaxLanes<Vec16>{});
  }

  // The packing's transposing copy (simd/avx_common.hpp).
  template <std::int64_t R>
  static void transpose_rows(std::int64_t live, std::int64_t kc, const float* src, std::int64_t stride, float* dst) {
    isa::transpose_rows_avx<Vec16, R>(live, kc, src, stride, dst);
  }
};

}  // namespace loom::kernels::cpu::avx512
