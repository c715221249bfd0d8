#include "loom/model/init.hpp"

#include <cmath>
#include <numbers>
#include <span>

#include "loom/core/error.hpp"

namespace loom::model {

std::array<std::uint32_t, 4> philox4x32_10(std::array<std::uint32_t, 4> c, std::array<std::uint32_t, 2> k) noexcept {
  // The round multipliers and the Weyl key increments of the paper's Philox4x32.
  constexpr std::uint64_t m0 = 0xD2511F53u, m1 = 0xCD9E8D57u;
  constexpr std::uint32_t w0 = 0x9E3779B9u, w1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = m0 * c[0], p1 = m1 * c[2];
    c = {static_cast<std::uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<std::uint32_t>(p1),
         static_cast<std::uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<std::uint32_t>(p0)};
    k = {k[0] + w0, k[1] + w1};
  }
  return c;
}

std::uint64_t parameter_stream(std::string_view name) noexcept {
  std::uint64_t hash = 0xcbf29ce484222325ull;
  for (const char ch : name) {
    hash ^= static_cast<unsigned char>(ch);
    hash *= 0x100000001b3ull;
  }
  return hash;
}

void fill_normal(const Tensor& out, std::uint64_t seed, std::uint64_t stream, std::int64_t first, float std) {
  require(out.defined() && out.dtype() == DType::f32 && out.device().is_cpu(), "fill_normal: needs an f32 CPU tensor, "
          "got ", out);
  require(first >= 0, "fill_normal: the first element must be >= 0, got ", first);
  const std::span<float> values = out.span<float>();
  const std::array<std::uint32_t, 2> key{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)};
  const auto stream_lo = static_cast<std::uint32_t>(stream), stream_hi = static_cast<std::uint32_t>(stream >> 32);
  for (std::size_t j = 0; j < values.size(); ++j) {
    const auto i = static_cast<std::uint64_t>(first) + j;
    const std::uint64_t block = i / 2;
    const std::array<std::uint32_t, 4> bits = philox4x32_10(
        {static_cast<std::uint32_t>(block), static_cast<std::uint32_t>(block >> 32), stream_lo, stream_hi}, key);
    // u1 in (0, 1] (its log is finite), u2 in [0, 1).
    const double u1 = (static_cast<double>(bits[0]) + 1.0) * 0x1p-32, u2 = static_cast<double>(bits[1]) * 0x1p-32;
    const double radius = std::sqrt(-2.0 * std::log(u1)), angle = 2.0 * std::numbers::pi * u2;
    values[j] = static_cast<float>(std * (i % 2 == 0 ? radius * std::cos(angle) : radius * std::sin(angle)));
  }
}

}  // namespace loom::model
