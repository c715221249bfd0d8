// Initial values from a counter-based generator, so that any rank can make exactly the elements it
// stores, in time and memory proportional to them, and get the bits one process makes for the
// whole tensor. Element i of a parameter is a function of (seed, parameter name, i) alone:
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011) with key =
// the seed and counter = (i / 2, FNV-1a hash of the name), and a normal deviate from its first
// two words by Box-Muller (even i: the cosine, odd i: the sine). The name, not the position, keys
// the stream: adding a parameter changes no other parameter's values.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "loom/core/tensor.hpp"

namespace loom::model {

// How a parameter starts (ParameterSpace::initialize applies it); `keep`: whatever its storage
// holds (the values it was built with).
struct Init {
  enum class Kind { keep, zeros, ones, normal };
  Kind kind = Kind::keep;
  float std = 0.0f;  // normal: N(0, std^2)
  static Init zeros() { return {Kind::zeros, 0.0f}; }
  static Init ones() { return {Kind::ones, 0.0f}; }
  static Init normal(float std) { return {Kind::normal, std}; }
};

// One Philox4x32-10 block.
std::array<std::uint32_t, 4> philox4x32_10(std::array<std::uint32_t, 4> counter, std::array<std::uint32_t, 2> key) noexcept;
// The stream of a parameter: FNV-1a (64 bit) of its name.
std::uint64_t parameter_stream(std::string_view name) noexcept;
// Elements [first, first + out.numel()) of the stream's N(0, std^2) sequence into `out` (f32 on
// the CPU).
void fill_normal(const Tensor& out, std::uint64_t seed, std::uint64_t stream, std::int64_t first, float std);

}  // namespace loom::model
