// TF32 rounding against crafted values and a by-value reference.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "loom/core/numeric.hpp"

using loom::Tf32Rounding;
using loom::round_to_tf32;

namespace {

// Rounds x to 10 explicit mantissa bits by value, in double.
float reference_tf32(float x, Tf32Rounding mode) {
  const double magnitude = std::fabs(static_cast<double>(x));
  if (magnitude == 0.0) return x;
  int exponent = 0;
  std::frexp(magnitude, &exponent);  // magnitude in [2^(exponent-1), 2^exponent)
  const double ulp = std::ldexp(1.0, std::max(exponent - 1, -126) - 10);
  const double lower = std::floor(magnitude / ulp) * ulp;
  const double rest = magnitude - lower;
  double result = lower;
  const bool lower_even = std::fmod(lower / ulp, 2.0) == 0.0;
  switch (mode) {
    case Tf32Rounding::truncate: break;
    case Tf32Rounding::nearest_away: if (rest >= ulp / 2) result = lower + ulp; break;
    case Tf32Rounding::nearest_even:
      if (rest > ulp / 2 || (rest == ulp / 2 && !lower_even)) result = lower + ulp;
      break;
  }
  return static_cast<float>(std::copysign(result, static_cast<double>(x)));
}

}  // namespace

TEST_CASE("TF32 rounding modes on crafted ties", "[numeric][tf32]") {
  const float tie_even = 1.0f + std::ldexp(1.0f, -11);      // halfway between 1 and 1+2^-10
  const float tie_odd = 1.0f + 3 * std::ldexp(1.0f, -11);   // halfway between 1+2^-10 and 1+2^-9
  CHECK(round_to_tf32(tie_even, Tf32Rounding::nearest_even) == 1.0f);
  CHECK(round_to_tf32(tie_even, Tf32Rounding::nearest_away) == 1.0f + std::ldexp(1.0f, -10));
  CHECK(round_to_tf32(tie_even, Tf32Rounding::truncate) == 1.0f);
  CHECK(round_to_tf32(tie_odd, Tf32Rounding::nearest_even) == 1.0f + std::ldexp(1.0f, -9));
  CHECK(round_to_tf32(tie_odd, Tf32Rounding::nearest_away) == 1.0f + std::ldexp(1.0f, -9));
  CHECK(round_to_tf32(tie_odd, Tf32Rounding::truncate) == 1.0f + std::ldexp(1.0f, -10));
  CHECK(round_to_tf32(-tie_even) == -(1.0f + std::ldexp(1.0f, -10)));  // default: ties away
}

TEST_CASE("TF32 rounding keeps infinities, NaNs and values already in TF32", "[numeric][tf32]") {
  for (auto mode : {Tf32Rounding::nearest_away, Tf32Rounding::nearest_even, Tf32Rounding::truncate}) {
    CHECK(round_to_tf32(INFINITY, mode) == INFINITY);
    CHECK(round_to_tf32(-INFINITY, mode) == -INFINITY);
    CHECK(std::isnan(round_to_tf32(std::bit_cast<float>(0x7f800001u), mode)));  // low-bit payload
    CHECK(round_to_tf32(0.75f, mode) == 0.75f);
    CHECK(std::signbit(round_to_tf32(-0.0f, mode)));
  }
}

TEST_CASE("TF32 rounding matches the by-value reference on random floats", "[numeric][tf32]") {
  std::mt19937 rng(42);
  std::uniform_int_distribution<std::uint32_t> any_bits;
  for (int i = 0; i < 300000; ++i) {
    const float x = std::bit_cast<float>(any_bits(rng));
    if (!std::isfinite(x)) continue;
    for (auto mode : {Tf32Rounding::nearest_away, Tf32Rounding::nearest_even, Tf32Rounding::truncate}) {
      const float got = round_to_tf32(x, mode);
      INFO("x = 0x" << std::hex << std::bit_cast<std::uint32_t>(x) << " mode " << static_cast<int>(mode));
      REQUIRE((std::bit_cast<std::uint32_t>(got) & 0x1fffu) == 0);  // 13 low bits dropped
      REQUIRE(std::bit_cast<std::uint32_t>(got) == std::bit_cast<std::uint32_t>(reference_tf32(x, mode)));
    }
  }
}
