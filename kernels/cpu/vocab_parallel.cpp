// One rank's share of the vocabulary-parallel cross-entropy and embedding on the CPU: rows in
// parallel, each row's sums in fp32 in column order (so a rank holding the whole vocabulary gives
// the same losses as a loop over the full row). f16/bf16 logits are widened element by element.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/float_types.hpp"
#include "kernels/cpu/vocab_parallel.hpp"
#include "loom/core/error.hpp"

namespace loom::kernels::cpu {

namespace {

std::int64_t target_at(const Tensor& targets, std::int64_t r) {
  return targets.dtype() == DType::i32 ? targets.data<std::int32_t>()[r] : targets.data<std::int64_t>()[r];
}

// The column of target t in this shard, or -1 when another rank holds it.
std::int64_t local_column(std::int64_t t, const VocabShard& shard, std::int64_t valid) {
  return t >= shard.first && t < shard.first + valid ? t - shard.first : -1;
}

}  // namespace

void vocab_parallel_max(const Tensor& logits, const Tensor& row_max, std::int64_t valid) {
  const std::int64_t rows = logits.size(0), width = logits.size(1);
  float* out = row_max.data<float>();
  visit_float_dtype(logits.dtype(), [&]<class T>() {
#pragma omp parallel for if (rows * valid > (1 << 15))
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* row = logits.data<T>() + r * width;
      float m = -std::numeric_limits<float>::infinity();
      for (std::int64_t j = 0; j < valid; ++j) m = std::max(m, to_f32(row[j]));
      out[r] = m;
    }
  });
}

void vocab_parallel_sum_exp(const Tensor& logits, const Tensor& targets, const Tensor& row_max, const Tensor& partial,
                            const VocabShard& shard, std::int64_t valid) {
  const std::int64_t rows = logits.size(0), width = logits.size(1);
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t t = target_at(targets, r);
    require(t == shard.ignore_index || (t >= 0 && t < shard.vocab_size), "vocab_parallel_sum_exp: target ", t,
            " at row ", r, " is outside the vocabulary [0, ", shard.vocab_size, ")");
  }
  const float* m = row_max.data<float>();
  float* out = partial.data<float>();
  visit_float_dtype(logits.dtype(), [&]<class T>() {
#pragma omp parallel for if (rows * valid > (1 << 15))
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* row = logits.data<T>() + r * width;
      const std::int64_t t = target_at(targets, r);
      float sum = 0.0f;
      for (std::int64_t j = 0; j < valid; ++j) sum += std::exp(to_f32(row[j]) - m[r]);
      const std::int64_t column = t == shard.ignore_index ? -1 : local_column(t, shard, valid);
      out[2 * r] = sum;
      out[2 * r + 1] = column >= 0 ? to_f32(row[column]) : 0.0f;
    }
  });
}

void vocab_parallel_loss(const Tensor& targets, const Tensor& row_max, const Tensor& partial, const Tensor& losses,
                         const VocabShard& shard) {
  const std::int64_t rows = targets.size(0);
  const float* m = row_max.data<float>();
  const float* p = partial.data<float>();
  float* out = losses.data<float>();
  for (std::int64_t r = 0; r < rows; ++r) {
    out[r] = target_at(targets, r) == shard.ignore_index ? 0.0f : std::log(p[2 * r]) + m[r] - p[2 * r + 1];
  }
}

void vocab_parallel_backward(const Tensor& logits, const Tensor& targets, const Tensor& row_max, const Tensor& partial,
                             const Tensor& dlosses, const Tensor& dlogits, const VocabShard& shard,
                             std::int64_t valid) {
  const std::int64_t rows = logits.size(0), width = logits.size(1);
  const float* m = row_max.data<float>();
  const float* p = partial.data<float>();
  const float* g = dlosses.data<float>();
  visit_float_dtype(logits.dtype(), [&]<class T>() {
#pragma omp parallel for if (rows * width > (1 << 15))
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* row = logits.data<T>() + r * width;
      T* out = dlogits.data<T>() + r * width;  // may be row: each element is read before it is written
      const std::int64_t t = target_at(targets, r);
      if (t == shard.ignore_index) {
        for (std::int64_t j = 0; j < width; ++j) out[j] = from_f32<T>(0.0f);
        continue;
      }
      const std::int64_t column = local_column(t, shard, valid);
      const float inverse = 1.0f / p[2 * r];
      for (std::int64_t j = 0; j < width; ++j) {
        const float d = j < valid ? g[r] * (std::exp(to_f32(row[j]) - m[r]) * inverse - (j == column ? 1.0f : 0.0f))
                                  : 0.0f;
        out[j] = from_f32<T>(d);
      }
    }
  });
}

void vocab_parallel_embedding_forward(const Tensor& tokens, const Tensor& wte_shard, const Tensor& wpe,
                                      const Tensor& out, const VocabShard& shard, std::int64_t valid) {
  const std::int64_t positions = tokens.numel(), steps = tokens.size(1), channels = wte_shard.size(1);
  const std::int32_t* tok = tokens.data<std::int32_t>();
  for (std::int64_t i = 0; i < positions; ++i) {
    require(tok[i] >= 0 && tok[i] < shard.vocab_size, "vocab_parallel_embedding: token ", tok[i], " at position ", i,
            " is outside the vocabulary [0, ", shard.vocab_size, ")");
  }
  visit_float_dtype(wte_shard.dtype(), [&]<class T>() {
#pragma omp parallel for if (positions * channels > (1 << 15))
    for (std::int64_t i = 0; i < positions; ++i) {
      const std::int64_t local = local_column(tok[i], shard, valid);
      T* o = out.data<T>() + i * channels;
      const T* token_row = local < 0 ? nullptr : wte_shard.data<T>() + local * channels;
      if (wpe.defined()) {  // the sum rounded once, as embedding_forward rounds it
        const T* position_row = wpe.data<T>() + (i % steps) * channels;
        for (std::int64_t c = 0; c < channels; ++c) {
          o[c] = from_f32<T>(token_row != nullptr ? to_f32(token_row[c]) + to_f32(position_row[c])
                                                  : to_f32(position_row[c]));
        }
      } else if (token_row == nullptr) {
        std::fill(o, o + channels, from_f32<T>(0.0f));
      } else {
        std::copy_n(token_row, channels, o);
      }
    }
  });
}

void vocab_parallel_embedding_backward(const Tensor& tokens, const Tensor& dout, const Tensor& dwte_shard,
                                       const Tensor& dwpe, const VocabShard& shard, std::int64_t valid) {
  const std::int64_t positions = tokens.numel(), steps = tokens.size(1), channels = dout.size(-1);
  const std::int32_t* tok = tokens.data<std::int32_t>();
  float* dwte = dwte_shard.data<float>();
  float* position_grad = dwpe.defined() ? dwpe.data<float>() : nullptr;
  // Threads own disjoint channel ranges and walk the positions in order: a fixed order, no races.
  visit_float_dtype(dout.dtype(), [&]<class T>() {
    const int parts = static_cast<int>(std::clamp<std::int64_t>(channels / 64, 1, omp_get_max_threads()));
#pragma omp parallel for num_threads(parts) if (parts > 1 && positions * channels > (1 << 15))
    for (int part = 0; part < parts; ++part) {
      const std::int64_t c0 = channels * part / parts, c1 = channels * (part + 1) / parts;
      for (std::int64_t i = 0; i < positions; ++i) {
        const std::int64_t local = local_column(tok[i], shard, valid);
        const T* g = dout.data<T>() + i * channels;
        if (position_grad != nullptr) {  // in position order, as embedding_backward adds them
          float* position_row = position_grad + (i % steps) * channels;
          for (std::int64_t c = c0; c < c1; ++c) position_row[c] += to_f32(g[c]);
        }
        if (local < 0) continue;
        float* row = dwte + local * channels;
        for (std::int64_t c = c0; c < c1; ++c) row[c] += to_f32(g[c]);
      }
    }
  });
}

}  // namespace loom::kernels::cpu
