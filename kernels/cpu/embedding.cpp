#include <omp.h>

#include <algorithm>

#include "kernels/cpu/float_types.hpp"
#include "kernels/cpu/training.hpp"
#include "loom/core/error.hpp"

namespace loom::kernels::cpu {

void embedding_forward(const Tensor& tokens, const Tensor& wte, const Tensor& wpe, const Tensor& out) {
  const std::int64_t batch = tokens.size(0), steps = tokens.size(1), channels = wte.size(1), vocab = wte.size(0);
  const std::int32_t* tok = tokens.data<std::int32_t>();
  for (std::int64_t i = 0; i < batch * steps; ++i) {
    require(tok[i] >= 0 && tok[i] < vocab, "embedding: token ", tok[i], " at position (", i / steps, ", ", i % steps,
            ") is outside the vocabulary [0, ", vocab, ")");
  }
  visit_float_dtype(wte.dtype(), [&]<class T>() {
#pragma omp parallel for if (batch * steps * channels > (1 << 15))
    for (std::int64_t i = 0; i < batch * steps; ++i) {
      const T* token_row = wte.data<T>() + static_cast<std::int64_t>(tok[i]) * channels;
      const T* position_row = wpe.data<T>() + (i % steps) * channels;
      T* o = out.data<T>() + i * channels;
      for (std::int64_t c = 0; c < channels; ++c) o[c] = from_f32<T>(to_f32(token_row[c]) + to_f32(position_row[c]));
    }
  });
}

void embedding_backward(const Tensor& tokens, const Tensor& dout, const Tensor& dwte, const Tensor& dwpe) {
  const std::int64_t batch = tokens.size(0), steps = tokens.size(1), channels = dout.size(-1), vocab = dwte.size(0);
  const std::int32_t* tok = tokens.data<std::int32_t>();
  for (std::int64_t i = 0; i < batch * steps; ++i) {
    require(tok[i] >= 0 && tok[i] < vocab, "embedding backward: token ", tok[i], " is outside [0, ", vocab, ")");
  }
  // Threads own disjoint channel ranges and walk positions in order: no races, a fixed order.
  visit_float_dtype(dout.dtype(), [&]<class T>() {
    visit_float_dtype(dwte.dtype(), [&]<class G>() {
      const int parts = static_cast<int>(std::clamp<std::int64_t>(channels / 64, 1, omp_get_max_threads()));
#pragma omp parallel for num_threads(parts) if (parts > 1 && batch * steps * channels > (1 << 15))
      for (int part = 0; part < parts; ++part) {
        const std::int64_t c0 = channels * part / parts, c1 = channels * (part + 1) / parts;
        for (std::int64_t i = 0; i < batch * steps; ++i) {
          const T* g = dout.data<T>() + i * channels;
          G* wte_row = dwte.data<G>() + static_cast<std::int64_t>(tok[i]) * channels;
          G* wpe_row = dwpe.data<G>() + (i % steps) * channels;
          for (std::int64_t c = c0; c < c1; ++c) {
            wte_row[c] = from_f32<G>(to_f32(wte_row[c]) + to_f32(g[c]));
            wpe_row[c] = from_f32<G>(to_f32(wpe_row[c]) + to_f32(g[c]));
          }
        }
      }
    });
  });
}

}  // namespace loom::kernels::cpu
