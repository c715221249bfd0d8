#include <bit>

#include "kernels/cpu/float_types.hpp"
#include "kernels/cpu/training.hpp"

namespace loom::kernels::cpu {

void cast(const Tensor& src, const Tensor& dst, const CastOptions& options) {
  const std::int64_t n = src.numel();
  const float scale = options.scale;
  if (options.rounding == Rounding::stochastic) {  // f32 -> bf16, validated
    const float* in = src.data<float>();
    bfloat16* out = dst.data<bfloat16>();
#pragma omp parallel for if (n > (1 << 15))
    for (std::int64_t i = 0; i < n; ++i) {
      const float value = in[i] * scale;
      const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
      if ((bits & 0x7f800000u) == 0x7f800000u) {  // inf and NaN convert as usual
        out[i] = to_bfloat16(value);
        continue;
      }
      const std::uint32_t noise = stochastic_rounding_bits(options.seed, options.offset + static_cast<std::uint64_t>(i));
      out[i] = bfloat16{static_cast<std::uint16_t>((bits + noise) >> 16)};
    }
    return;
  }
  visit_float_dtype(src.dtype(), [&]<class In>() {
    visit_float_dtype(dst.dtype(), [&]<class Out>() {
      const In* in = src.data<In>();
      Out* out = dst.data<Out>();
#pragma omp parallel for if (n > (1 << 15))
      for (std::int64_t i = 0; i < n; ++i) out[i] = from_f32<Out>(to_f32(in[i]) * scale);
    });
  });
}

}  // namespace loom::kernels::cpu
