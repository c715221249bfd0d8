// float <-> f16 and float <-> bf16 over all 65,536 bit patterns, against references computed here
// from the formats' definitions in double precision (no bit tricks shared with the library).
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "loom/core/numeric.hpp"

namespace {

// Value of a binary16 pattern: 1 sign, 5 exponent (bias 15), 10 mantissa bits.
double half_value(std::uint16_t bits) {
  const int exponent = (bits >> 10) & 0x1f;
  const int mantissa = bits & 0x3ff;
  const double sign = (bits & 0x8000) ? -1.0 : 1.0;
  if (exponent == 0x1f) return mantissa ? std::numeric_limits<double>::quiet_NaN() : sign * INFINITY;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

// Value of a bfloat16 pattern: 1 sign, 8 exponent (bias 127), 7 mantissa bits.
double bf16_value(std::uint16_t bits) {
  const int exponent = (bits >> 7) & 0xff;
  const int mantissa = bits & 0x7f;
  const double sign = (bits & 0x8000) ? -1.0 : 1.0;
  if (exponent == 0xff) return mantissa ? std::numeric_limits<double>::quiet_NaN() : sign * INFINITY;
  if (exponent == 0) return sign * std::ldexp(mantissa, -133);
  return sign * std::ldexp(128 + mantissa, exponent - 134);
}

// Distance between a finite non-negative pattern and the next one up, were the exponent unbounded.
double half_ulp(std::uint16_t bits) {
  const int exponent = (bits >> 10) & 0x1f;
  return std::ldexp(1.0, std::max(exponent, 1) - 25);
}
double bf16_ulp(std::uint16_t bits) {
  const int exponent = (bits >> 7) & 0xff;
  return std::ldexp(1.0, std::max(exponent, 1) - 134);
}

// Round-to-nearest-even by value: among the two patterns around |x| (lower is the largest whose
// value is <= |x|), take the closer; on a tie, the even one; past the largest finite value,
// "upper" is the infinity pattern. Sign is applied last.
template <class Value, class Ulp>
std::uint16_t round_by_value(double x, std::uint16_t max_finite, std::uint16_t infinity, Value value, Ulp ulp) {
  const std::uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double magnitude = std::fabs(x);
  // Binary search over the monotonic non-negative finite patterns [0, max_finite].
  std::uint32_t lo = 0, hi = max_finite;
  while (lo < hi) {
    const std::uint32_t mid = (lo + hi + 1) / 2;
    if (value(static_cast<std::uint16_t>(mid)) <= magnitude) lo = mid; else hi = mid - 1;
  }
  const auto lower = static_cast<std::uint16_t>(lo);
  const double lower_value = value(lower);
  const double upper_value = lower_value + ulp(lower);
  const std::uint16_t upper = lower == max_finite ? infinity : static_cast<std::uint16_t>(lower + 1);
  const double below = magnitude - lower_value, above = upper_value - magnitude;
  std::uint16_t chosen = lower;
  if (above < below || (above == below && (lower & 1))) chosen = upper;
  return static_cast<std::uint16_t>(sign | chosen);
}

std::uint16_t reference_to_half(double x) { return round_by_value(x, 0x7bff, 0x7c00, half_value, half_ulp); }
std::uint16_t reference_to_bf16(double x) { return round_by_value(x, 0x7f7f, 0x7f80, bf16_value, bf16_ulp); }

std::uint32_t bits_of(float x) { return std::bit_cast<std::uint32_t>(x); }

}  // namespace

TEST_CASE("f16 -> float is exact for all 65,536 patterns", "[numeric][f16]") {
  for (std::uint32_t pattern = 0; pattern <= 0xffff; ++pattern) {
    const auto bits = static_cast<std::uint16_t>(pattern);
    const float got = loom::half_bits_to_float(bits);
    const double expected = half_value(bits);
    INFO("f16 pattern 0x" << std::hex << pattern);
    if (std::isnan(expected)) {
      REQUIRE(std::isnan(got));
      REQUIRE(std::signbit(got) == bool(bits & 0x8000));
      REQUIRE(((bits_of(got) >> 13) & 0x3ff) == (bits & 0x3ffu));  // payload kept
    } else {
      REQUIRE(static_cast<double>(got) == expected);
      REQUIRE(std::signbit(got) == bool(bits & 0x8000));  // -0 stays -0
    }
  }
}

TEST_CASE("float -> f16 round-trips every f16 value and keeps NaNs NaN", "[numeric][f16]") {
  for (std::uint32_t pattern = 0; pattern <= 0xffff; ++pattern) {
    const auto bits = static_cast<std::uint16_t>(pattern);
    const std::uint16_t back = loom::float_to_half_bits(loom::half_bits_to_float(bits));
    INFO("f16 pattern 0x" << std::hex << pattern);
    if ((bits & 0x7c00) == 0x7c00 && (bits & 0x3ff)) {
      REQUIRE((back & 0x7c00) == 0x7c00);
      REQUIRE((back & 0x3ff) != 0);                 // still NaN, not infinity
      REQUIRE((back & 0x8000) == (bits & 0x8000));  // sign kept
      REQUIRE((back & 0x200) != 0);                 // quiet
      if (bits & 0x200) REQUIRE(back == bits);      // quiet NaNs round-trip exactly
    } else {
      REQUIRE(back == bits);
    }
  }
}

TEST_CASE("float -> f16 rounds to nearest even at every boundary between f16 values", "[numeric][f16]") {
  // Midpoints between neighbours (0x7bff's upper neighbour is the overflow threshold 65520)
  // and the floats right beside them, for both signs.
  for (std::uint16_t lower = 0; lower <= 0x7bff; ++lower) {
    const double midpoint = half_value(lower) + half_ulp(lower) / 2;
    const auto mid = static_cast<float>(midpoint);
    REQUIRE(static_cast<double>(mid) == midpoint);  // exactly representable: 12 significant bits
    const std::uint16_t upper = lower == 0x7bff ? 0x7c00 : static_cast<std::uint16_t>(lower + 1);
    const std::uint16_t even = (lower & 1) ? upper : lower;
    for (float sign : {1.0f, -1.0f}) {
      const std::uint16_t s = sign < 0 ? 0x8000 : 0;
      INFO("between f16 0x" << std::hex << lower << " and 0x" << upper << ", sign " << sign);
      REQUIRE(loom::float_to_half_bits(sign * mid) == (s | even));
      REQUIRE(loom::float_to_half_bits(sign * std::nextafter(mid, 0.0f)) == (s | lower));
      REQUIRE(loom::float_to_half_bits(sign * std::nextafter(mid, INFINITY)) == (s | upper));
    }
  }
}

TEST_CASE("float -> f16 matches the by-value reference on random and special floats", "[numeric][f16]") {
  std::vector<float> inputs = {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 65519.99f, 65520.0f, 1e10f,
                               std::numeric_limits<float>::max(), std::numeric_limits<float>::denorm_min(),
                               std::ldexp(1.0f, -24), std::ldexp(1.0f, -25), std::ldexp(1.5f, -25),
                               std::ldexp(1.0f, -14), std::ldexp(1023.0f, -24), INFINITY, -INFINITY};
  std::mt19937 rng(20240520);
  std::uniform_int_distribution<std::uint32_t> any_bits;
  std::uniform_real_distribution<float> half_range(-70000.0f, 70000.0f);
  for (int i = 0; i < 200000; ++i) {
    inputs.push_back(std::bit_cast<float>(any_bits(rng)));       // every exponent
    inputs.push_back(half_range(rng));                           // f16's normal range
    inputs.push_back(std::ldexp(half_range(rng), -30));          // around f16 subnormals
  }
  for (float x : inputs) {
    if (std::isnan(x)) continue;
    INFO("float " << x << " (0x" << std::hex << bits_of(x) << ")");
    REQUIRE(loom::float_to_half_bits(x) == reference_to_half(x));
  }
  const std::uint16_t nan = loom::float_to_half_bits(std::bit_cast<float>(0xffc00001u));
  CHECK((nan & 0x7c00) == 0x7c00);
  CHECK((nan & 0x3ff) != 0);
  CHECK((nan & 0x8000) != 0);
}

TEST_CASE("bf16 -> float is exact for all 65,536 patterns", "[numeric][bf16]") {
  for (std::uint32_t pattern = 0; pattern <= 0xffff; ++pattern) {
    const auto bits = static_cast<std::uint16_t>(pattern);
    const float got = loom::bf16_bits_to_float(bits);
    const double expected = bf16_value(bits);
    INFO("bf16 pattern 0x" << std::hex << pattern);
    if (std::isnan(expected)) {
      REQUIRE(std::isnan(got));
      REQUIRE(std::signbit(got) == bool(bits & 0x8000));
    } else {
      REQUIRE(static_cast<double>(got) == expected);
      REQUIRE(std::signbit(got) == bool(bits & 0x8000));
    }
  }
}

TEST_CASE("float -> bf16 rounds to nearest even for every bf16 pattern and low half", "[numeric][bf16]") {
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::uint32_t> low_bits(0, 0xffff);
  for (std::uint32_t pattern = 0; pattern <= 0xffff; ++pattern) {
    if ((pattern & 0x7f80) == 0x7f80) continue;  // inf/NaN: tested below
    for (std::uint32_t low : {0u, 1u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu, low_bits(rng), low_bits(rng)}) {
      const float x = std::bit_cast<float>((pattern << 16) | low);
      INFO("float 0x" << std::hex << bits_of(x));
      REQUIRE(loom::float_to_bf16_bits(x) == reference_to_bf16(x));
    }
  }
}

TEST_CASE("float -> bf16 keeps infinities and NaNs, and never turns a NaN into infinity", "[numeric][bf16]") {
  CHECK(loom::float_to_bf16_bits(INFINITY) == 0x7f80);
  CHECK(loom::float_to_bf16_bits(-INFINITY) == 0xff80);
  CHECK(loom::float_to_bf16_bits(std::numeric_limits<float>::max()) == 0x7f80);  // rounds up past max
  for (std::uint32_t payload : {1u, 0x7fu, 0xffffu, 0x10000u, 0x400000u, 0x7fffffu}) {
    for (std::uint32_t sign : {0u, 0x80000000u}) {
      const float nan = std::bit_cast<float>(sign | 0x7f800000u | payload);
      const std::uint16_t got = loom::float_to_bf16_bits(nan);
      INFO("NaN payload 0x" << std::hex << payload);
      REQUIRE(std::isnan(loom::bf16_bits_to_float(got)));
      REQUIRE((got & 0x8000) == (sign >> 16));
    }
  }
}

TEST_CASE("typed wrappers agree with the bit-level conversions", "[numeric]") {
  STATIC_REQUIRE(loom::to_float(loom::to_half(1.5f)) == 1.5f);
  STATIC_REQUIRE(loom::to_float(loom::to_bfloat16(-3.0f)) == -3.0f);
  CHECK(loom::to_half(0.1f).bits == loom::float_to_half_bits(0.1f));
  CHECK(loom::to_bfloat16(0.1f).bits == loom::float_to_bf16_bits(0.1f));
}

TEST_CASE("double -> f16/bf16 rounds once, where going through float would round twice", "[numeric]") {
  // 1 + 2^-11 + 2^-30 is just above the f16 midpoint between 1 and 1 + 2^-10, but rounds to that
  // exact midpoint as a float; likewise 1 + 2^-8 + 2^-30 for bf16.
  const double above_f16_tie = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -30);
  const double above_bf16_tie = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30);
  CHECK(loom::float_to_half_bits(static_cast<float>(above_f16_tie)) == 0x3c00);  // the double rounding
  CHECK(loom::double_to_half_bits(above_f16_tie) == 0x3c01);
  CHECK(loom::double_to_half_bits(-above_f16_tie) == 0xbc01);
  CHECK(loom::double_to_bf16_bits(above_bf16_tie) == 0x3f81);
  CHECK(loom::double_to_half_bits(1e300) == 0x7c00);
  CHECK(loom::double_to_bf16_bits(-1e300) == 0xff80);
  CHECK(loom::double_to_half_bits(INFINITY) == 0x7c00);
  CHECK(loom::double_to_half_bits(1e-300) == 0);
  CHECK(std::isnan(loom::half_bits_to_float(loom::double_to_half_bits(NAN))));

  std::mt19937_64 rng(99);
  std::uniform_int_distribution<std::uint64_t> any_bits;
  std::uniform_real_distribution<double> near_one(0.5, 2.0);
  for (int i = 0; i < 200000; ++i) {
    for (double x : {std::bit_cast<double>(any_bits(rng)), near_one(rng), std::ldexp(near_one(rng), -20),
                     std::ldexp(near_one(rng), 120)}) {
      if (std::isnan(x)) continue;
      INFO("double " << x);
      REQUIRE(loom::double_to_half_bits(x) == reference_to_half(x));
      REQUIRE(loom::double_to_bf16_bits(x) == reference_to_bf16(x));
    }
  }
}

TEST_CASE("double -> float narrowing is defined for every double", "[numeric]") {
  const double max = std::numeric_limits<float>::max();
  const double half_ulp_above_max = std::ldexp(1.0, 128) - std::ldexp(1.0, 103);
  CHECK(loom::narrow_to_float(1e300) == INFINITY);
  CHECK(loom::narrow_to_float(-1e300) == -INFINITY);
  CHECK(loom::narrow_to_float(half_ulp_above_max) == INFINITY);  // the tie goes to even: infinity
  CHECK(loom::narrow_to_float(std::nextafter(half_ulp_above_max, 0.0)) == static_cast<float>(max));
  CHECK(loom::narrow_to_float(0.1) == 0.1f);
  CHECK(loom::narrow_to_float_round_to_odd(1e300) == std::numeric_limits<float>::max());
  CHECK(loom::narrow_to_float_round_to_odd(0.5) == 0.5f);
  // 0.1 lies between floats 0x3dcccccc and 0x3dcccccd: round to odd picks the odd one.
  CHECK(std::bit_cast<std::uint32_t>(loom::narrow_to_float_round_to_odd(0.1)) == 0x3dcccccdu);
  // 1 + 3.75 ulp: nearest-even rounds up to 1 + 4 ulp; round to odd keeps the odd 1 + 3 ulp.
  const double x = 1.0 + 3.75 * std::ldexp(1.0, -23);
  CHECK(static_cast<float>(x) == 1.0f + 4 * std::ldexp(1.0f, -23));
  CHECK(loom::narrow_to_float_round_to_odd(x) == 1.0f + 3 * std::ldexp(1.0f, -23));
  CHECK(loom::narrow_to_float_round_to_odd(-x) == -(1.0f + 3 * std::ldexp(1.0f, -23)));
}
