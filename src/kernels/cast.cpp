#include "loom/kernels/cast.hpp"

#include "kernels/cpu/training.hpp"
#include "kernels/cuda/training.hpp"
#include "validate.hpp"

namespace loom::kernels {

std::uint32_t stochastic_rounding_bits(std::uint64_t seed, std::uint64_t index) noexcept {
  // splitmix64 of (seed, index): a counter-based generator, so any device can compute element
  // i's bits independently and get the same answer.
  std::uint64_t z = seed + 0x9e3779b97f4a7c15ull * (index + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<std::uint32_t>(z >> 48);
}

void cast(const Tensor& src, const Tensor& dst, const CastOptions& options, StreamRef stream) {
  const char* kernel = "cast";
  const Device device = detail::common_device(kernel, {{"src", src}, {"dst", dst}});
  detail::require_floating(kernel, {"src", src});
  detail::require_floating(kernel, {"dst", dst});
  detail::require_numel(kernel, {"dst", dst}, src.numel());
  if (options.rounding == Rounding::stochastic) {
    require(src.dtype() == DType::f32 && dst.dtype() == DType::bf16,
            "cast: stochastic rounding is f32 -> bf16 only, got ", src.dtype(), " -> ", dst.dtype());
  }
  detail::dispatch(kernel, device, stream, [&] { cpu::cast(src, dst, options); },
                   [&](void* s) { cuda::cast(src, dst, options, s); });
}

}  // namespace loom::kernels
