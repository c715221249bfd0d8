// Vec16 for the portable variant: 16 floats in an array, every operation a loop over the lanes.
// Fused multiply-adds are std::fma (one rounding, as the AVX2 and AVX-512 FMA instructions), and
// min/max/comparisons follow the x86 instructions' rules, so the portable variant computes the
// same bits as the vector ones. Included only by isa_portable.cpp (see isa_kernels.hpp).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace loom::kernels::cpu::portable {

struct Vec16 {
  static constexpr int lanes = 16;
  float v[16];

  static Vec16 zero() { return broadcast(0.0f); }
  static Vec16 broadcast(float x) {
    Vec16 r;
    for (float& lane : r.v) lane = x;
    return r;
  }
  static Vec16 load(const float* p) {
    Vec16 r;
    std::memcpy(r.v, p, sizeof r.v);
    return r;
  }
  // Lanes [0, count) from p, the others +0.0f; 0 <= count <= 16.
  static Vec16 load_partial(const float* p, int count) {
    Vec16 r = zero();
    for (int i = 0; i < count; ++i) r.v[i] = p[i];
    return r;
  }
  // Lanes [0, count) from p, the others from fill.
  static Vec16 load_partial_or(const float* p, int count, const Vec16& fill) {
    Vec16 r = fill;
    for (int i = 0; i < count; ++i) r.v[i] = p[i];
    return r;
  }
  void store(float* p) const { std::memcpy(p, v, sizeof v); }
  void store_partial(float* p, int count) const {
    for (int i = 0; i < count; ++i) p[i] = v[i];
  }

  template <class Op>
  static Vec16 map(const Vec16& a, const Vec16& b, Op op) {
    Vec16 r;
    for (int i = 0; i < 16; ++i) r.v[i] = op(a.v[i], b.v[i]);
    return r;
  }
  Vec16 operator+(const Vec16& b) const { return map(*this, b, [](float x, float y) { return x + y; }); }
  Vec16 operator-(const Vec16& b) const { return map(*this, b, [](float x, float y) { return x - y; }); }
  Vec16 operator*(const Vec16& b) const { return map(*this, b, [](float x, float y) { return x * y; }); }
  Vec16 operator/(const Vec16& b) const { return map(*this, b, [](float x, float y) { return x / y; }); }
  // a * b + c and c - a * b, each rounded once.
  static Vec16 fma(const Vec16& a, const Vec16& b, const Vec16& c) {
    Vec16 r;
    for (int i = 0; i < 16; ++i) r.v[i] = std::fma(a.v[i], b.v[i], c.v[i]);
    return r;
  }
  static Vec16 fnma(const Vec16& a, const Vec16& b, const Vec16& c) {
    Vec16 r;
    for (int i = 0; i < 16; ++i) r.v[i] = std::fma(-a.v[i], b.v[i], c.v[i]);
    return r;
  }
  static Vec16 sqrt(const Vec16& a) {
    Vec16 r;
    for (int i = 0; i < 16; ++i) r.v[i] = std::sqrt(a.v[i]);
    return r;
  }
  // As MAXPS/MINPS: the second operand when either is NaN or both are zeros.
  static Vec16 max(const Vec16& a, const Vec16& b) { return map(a, b, [](float x, float y) { return x > y ? x : y; }); }
  static Vec16 min(const Vec16& a, const Vec16& b) { return map(a, b, [](float x, float y) { return x < y ? x : y; }); }
  // The nearest integer, ties to even (the default rounding mode).
  static Vec16 round_even(const Vec16& a) {
    Vec16 r;
    for (int i = 0; i < 16; ++i) r.v[i] = std::nearbyint(a.v[i]);
    return r;
  }
  // 2^n for integer-valued n in [-126, 127], built from the exponent bits.
  static Vec16 pow2(const Vec16& n) {
    Vec16 r;
    for (int i = 0; i < 16; ++i) {
      const std::uint32_t bits = static_cast<std::uint32_t>(static_cast<std::int32_t>(n.v[i]) + 127) << 23;
      std::memcpy(&r.v[i], &bits, sizeof bits);
    }
    return r;
  }
  // Lane-wise a > b ? x : y, a < b ? x : y, and isnan(a) ? x : y.
  static Vec16 select_gt(const Vec16& a, const Vec16& b, const Vec16& x, const Vec16& y) {
    Vec16 r;
    for (int i = 0; i < 16; ++i) r.v[i] = a.v[i] > b.v[i] ? x.v[i] : y.v[i];
    return r;
  }
  static Vec16 select_lt(const Vec16& a, const Vec16& b, const Vec16& x, const Vec16& y) {
    Vec16 r;
    for (int i = 0; i < 16; ++i) r.v[i] = a.v[i] < b.v[i] ? x.v[i] : y.v[i];
    return r;
  }
  static Vec16 select_nan(const Vec16& a, const Vec16& x, const Vec16& y) {
    Vec16 r;
    for (int i = 0; i < 16; ++i) r.v[i] = a.v[i] != a.v[i] ? x.v[i] : y.v[i];
    return r;
  }

  // The lanes combined in the fixed tree every variant uses: lane i with lane i + 8, then i + 4,
  // then i + 2, then lane 0 with lane 1 (op(lower, upper) at each step).
  template <class Op>
  float reduce(Op op) const {
    float t[8];
    for (int i = 0; i < 8; ++i) t[i] = op(v[i], v[i + 8]);
    for (int i = 0; i < 4; ++i) t[i] = op(t[i], t[i + 4]);
    for (int i = 0; i < 2; ++i) t[i] = op(t[i], t[i + 2]);
    return op(t[0], t[1]);
  }
  float sum() const { return reduce([](float x, float y) { return x + y; }); }
  float max_lane() const { return reduce([](float x, float y) { return x > y ? x : y; }); }

  // The GEMM packing's transposing copy: dst[p * R + r] = src[r * stride + p] for r < live, zeros
  // for live <= r < R, p < kc.
  template <std::int64_t R>
  static void transpose_rows(std::int64_t live, std::int64_t kc, const float* src, std::int64_t stride, float* dst) {
    for (std::int64_t p = 0; p < kc; ++p) {
      for (std::int64_t r = 0; r < R; ++r) dst[p * R + r] = r < live ? src[r * stride + p] : 0.0f;
    }
  }
};

}  // namespace loom::kernels::cpu::portable
