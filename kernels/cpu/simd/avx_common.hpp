// What the AVX2 and AVX-512 variants share, on ymm registers, templated on the variant's Vec16 so
// each variant's copy has a name of its own (included inside the variant's target region).
//
// The lane tree of portable::Vec16::reduce from its first step on: 8 lanes, then 4, 2, 1.
//
// The GEMM packing's transposing copy, in 8 x 8 blocks of ymm registers: dst[p * R + r] = src[r * stride + p] for rows r < live, zeros for live <= r < R, and
// p < kc. Used where the packed layout runs across the source's contiguous direction (A with k
// contiguous, B stored transposed).
//
// When R is not a multiple of 8 the last 8-row group is stored whole, so each store of depth p
// runs up to 8 - R % 8 floats into depth p + 1, which the next store then overwrites: stores go in
// ascending p, and the buffer needs sgemm_pack_slack floats after the last sliver.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace loom::kernels::cpu::isa {

// op over lanes i and i + 4 of t8 (the 8 lanes left after the first step), then i and i + 2, then
// lanes 0 and 1.
template <class V, class Op>
inline float reduce8(__m256 t8, Op op) {
  const __m128 t4 = op(_mm256_castps256_ps128(t8), _mm256_extractf128_ps(t8, 1));
  const __m128 t2 = op(t4, _mm_movehl_ps(t4, t4));     // lanes 0, 1: op(t0, t2), op(t1, t3)
  return _mm_cvtss_f32(op(t2, _mm_movehdup_ps(t2)));  // op(lane 0, lane 1)
}

template <class V>
struct AddLanes {
  __m256 operator()(__m256 a, __m256 b) const { return _mm256_add_ps(a, b); }
  __m128 operator()(__m128 a, __m128 b) const { return _mm_add_ps(a, b); }
};
template <class V>
struct MaxLanes {
  __m256 operator()(__m256 a, __m256 b) const { return _mm256_max_ps(a, b); }
  __m128 operator()(__m128 a, __m128 b) const { return _mm_max_ps(a, b); }
};

template <class V>
inline void transpose8x8(__m256 r[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
  r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
  r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
  r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
  r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

template <class V, std::int64_t R>
void transpose_rows_avx(std::int64_t live, std::int64_t kc, const float* src, std::int64_t stride, float* dst) {
  constexpr std::int64_t groups = (R + 7) / 8;
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (std::int64_t p0 = 0; p0 < kc; p0 += 8) {
    const std::int64_t depth = kc - p0 < 8 ? kc - p0 : 8;
    const __m256i in_depth = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(depth)), lane);
    __m256 block[groups][8];
    for (std::int64_t g = 0; g < groups; ++g) {
      for (std::int64_t i = 0; i < 8; ++i) {
        const std::int64_t r = 8 * g + i;
        const float* row = src + r * stride + p0;
        block[g][i] = r >= live ? _mm256_setzero_ps()
                                : depth == 8 ? _mm256_loadu_ps(row) : _mm256_maskload_ps(row, in_depth);
      }
      transpose8x8<V>(block[g]);
    }
    for (std::int64_t q = 0; q < depth; ++q) {
      for (std::int64_t g = 0; g < groups; ++g) _mm256_storeu_ps(dst + (p0 + q) * R + 8 * g, block[g][q]);
    }
  }
}

}  // namespace loom::kernels::cpu::isa
