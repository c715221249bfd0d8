// Casts between f32, f16 and bf16, including stochastic rounding to bf16.
#pragma once

#include <cstdint>

#include "loom/core/stream.hpp"
#include "loom/core/tensor.hpp"

namespace loom::kernels {

enum class Rounding { nearest_even, stochastic };

struct CastOptions {
  Rounding rounding = Rounding::nearest_even;
  // Stochastic rounding (f32 -> bf16 only): element i rounds up with probability equal to its
  // distance from the value below, using random bits that depend only on (seed, offset + i), so
  // results are reproducible and identical on every device.
  std::uint64_t seed = 0;
  std::uint64_t offset = 0;
  // dst = src x scale, multiplied in fp32 before the one rounding (gradient compression divides by
  // the number of ranks on the way to 16 bits, so their sum cannot overflow).
  float scale = 1.0f;
};

// dst = src x options.scale converted to dst's dtype. Same numel; f32, f16 or bf16 each side.
void cast(const Tensor& src, const Tensor& dst, const CastOptions& options = {}, StreamRef stream = {});

// The 16 random bits stochastic rounding adds below the bf16 mantissa for element `index`.
std::uint32_t stochastic_rounding_bits(std::uint64_t seed, std::uint64_t index) noexcept;

}  // namespace loom::kernels
