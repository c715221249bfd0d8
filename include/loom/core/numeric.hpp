// Conversions between float and the 16-bit floating formats, and TF32 rounding.
// Round-to-nearest-even, overflow to infinity, subnormals kept, NaN stays NaN (quieted, sign and
// top payload bits kept). Inline and constexpr: CPU kernels call these in their inner loops.
#pragma once

#include <bit>
#include <cstdint>
#include <limits>

namespace loom {

// Storage types for the 16-bit dtypes: plain bits, so they are trivially copyable and never
// convert implicitly.
struct half {
  std::uint16_t bits = 0;
};
struct bfloat16 {
  std::uint16_t bits = 0;
};

constexpr std::uint16_t float_to_half_bits(float value) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(value);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t magnitude = x & 0x7fffffffu;
  if (magnitude > 0x7f800000u) {  // NaN
    return static_cast<std::uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
  }
  if (magnitude >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 65520: inf
  if (magnitude >= 0x38800000u) {  // normal half (>= 2^-14): rebias exponent 127 -> 15
    std::uint32_t h = (magnitude - 0x38000000u) >> 13;
    const std::uint32_t rest = magnitude & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry into the exponent is right
    return static_cast<std::uint16_t>(sign | h);
  }
  if (magnitude <= 0x33000000u) return sign;  // <= 2^-25 (the tie at 2^-25 goes to even zero)
  // Subnormal half: count units of 2^-24. value = mantissa * 2^(exponent - 150).
  const std::uint32_t exponent = magnitude >> 23;
  const std::uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
  const std::uint32_t shift = 126u - exponent;  // 14..24
  std::uint32_t q = mantissa >> shift;
  const std::uint32_t rest = mantissa & ((1u << shift) - 1u);
  const std::uint32_t halfway = 1u << (shift - 1u);
  if (rest > halfway || (rest == halfway && (q & 1u))) ++q;  // may become the smallest normal
  return static_cast<std::uint16_t>(sign | q);
}

constexpr float half_bits_to_float(std::uint16_t bits) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1fu;
  const std::uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0x1fu) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;  // exact: mantissa < 2^10
    return std::bit_cast<float>(sign | std::bit_cast<std::uint32_t>(magnitude));
  }
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

constexpr std::uint16_t float_to_bf16_bits(float value) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x0040u);
  const std::uint32_t lsb = (x >> 16) & 1u;
  return static_cast<std::uint16_t>((x + 0x7fffu + lsb) >> 16);  // overflow rounds to inf
}

constexpr float bf16_bits_to_float(std::uint16_t bits) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

// double -> float, round to nearest even, overflow to infinity (defined for every double).
constexpr float narrow_to_float(double value) noexcept {
  // Doubles at or beyond FLT_MAX + half an ulp (2^128 - 2^103) round to infinity.
  constexpr double overflow = 340282356779733661637539395458142568448.0;
  if (value >= overflow) return std::numeric_limits<float>::infinity();
  if (value <= -overflow) return -std::numeric_limits<float>::infinity();
  return static_cast<float>(value);
}

// double -> float rounding to odd: exact when representable, else the value truncated toward zero
// with its last mantissa bit set. Rounding that float to f16 or bf16 (at least two fewer
// significand bits) gives the same result as rounding the double directly: no double rounding.
constexpr float narrow_to_float_round_to_odd(double value) noexcept {
  if (value != value) return static_cast<float>(value);  // NaN
  constexpr double max = std::numeric_limits<float>::max();
  if (value > max && value != std::numeric_limits<double>::infinity()) return std::numeric_limits<float>::max();
  if (value < -max && value != -std::numeric_limits<double>::infinity()) return -std::numeric_limits<float>::max();
  const float nearest = static_cast<float>(value);
  if (static_cast<double>(nearest) == value) return nearest;
  std::uint32_t bits = std::bit_cast<std::uint32_t>(nearest);
  const double magnitude = value < 0 ? -value : value;
  const double nearest_magnitude = nearest < 0 ? -static_cast<double>(nearest) : static_cast<double>(nearest);
  if (nearest_magnitude > magnitude) --bits;  // rounded away from zero: step back toward zero
  return std::bit_cast<float>(bits | 1u);
}

constexpr std::uint16_t double_to_half_bits(double value) noexcept {
  return float_to_half_bits(narrow_to_float_round_to_odd(value));
}
constexpr std::uint16_t double_to_bf16_bits(double value) noexcept {
  return float_to_bf16_bits(narrow_to_float_round_to_odd(value));
}

constexpr half to_half(float value) noexcept { return half{float_to_half_bits(value)}; }
constexpr bfloat16 to_bfloat16(float value) noexcept { return bfloat16{float_to_bf16_bits(value)}; }
constexpr float to_float(half value) noexcept { return half_bits_to_float(value.bits); }
constexpr float to_float(bfloat16 value) noexcept { return bf16_bits_to_float(value.bits); }

// TF32 keeps fp32's 8-bit exponent and 10 of its 23 mantissa bits. How the 13 dropped bits are
// rounded depends on who converts: cvt.rna.tf32.f32 (what CUTLASS-style kernels do before mma)
// rounds to nearest with ties away from zero; feeding raw fp32 bits to a tf32 mma truncates.
enum class Tf32Rounding { nearest_away, nearest_even, truncate };

constexpr float round_to_tf32(float value, Tf32Rounding mode = Tf32Rounding::nearest_away) noexcept {
  std::uint32_t x = std::bit_cast<std::uint32_t>(value);
  if ((x & 0x7f800000u) == 0x7f800000u) {  // inf stays inf; NaN stays a quiet NaN
    return std::bit_cast<float>((x & 0x7fffffffu) > 0x7f800000u ? ((x | 0x400000u) & ~0x1fffu) : x);
  }
  switch (mode) {
    case Tf32Rounding::nearest_away: x += 0x1000u; break;
    case Tf32Rounding::nearest_even: x += 0xfffu + ((x >> 13) & 1u); break;
    case Tf32Rounding::truncate: break;
  }
  return std::bit_cast<float>(x & ~0x1fffu);
}

}  // namespace loom
