#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/float_types.hpp"
#include "kernels/cpu/training.hpp"
#include "loom/core/error.hpp"

namespace loom::kernels::cpu {

namespace {

// Loads row[0..n) as fp32 into e and replaces it by exp(row - max(row)), with Eigen's vectorized
// exp; returns log(sum(exp(row))). n >= 1.
template <class T>
float exp_row(const T* row, std::int64_t n, Eigen::ArrayXf& e) {
  e.resize(n);
  for (std::int64_t j = 0; j < n; ++j) e[j] = to_f32(row[j]);
  const float m = e.maxCoeff();
  e = (e - m).exp();
  return m + std::log(e.sum());
}

std::int64_t target_at(const Tensor& targets, std::int64_t r) {
  return targets.dtype() == DType::i32 ? targets.data<std::int32_t>()[r] : targets.data<std::int64_t>()[r];
}

}  // namespace

void softmax_forward(const Tensor& x, const Tensor& out, bool causal) {
  const std::int64_t n = x.size(-1), rows = n == 0 ? 0 : x.numel() / n;
  visit_float_dtype(x.dtype(), [&]<class T>() {
#pragma omp parallel if (rows * n > (1 << 15))
    {
      Eigen::ArrayXf e;
#pragma omp for
      for (std::int64_t r = 0; r < rows; ++r) {
        const T* row = x.data<T>() + r * n;
        T* o = out.data<T>() + r * n;
        const std::int64_t kept = causal ? r % n + 1 : n;  // row t of a T x T block sees columns 0..t
        exp_row(row, kept, e);
        const float inverse_sum = 1.0f / e.sum();
        for (std::int64_t j = 0; j < kept; ++j) o[j] = from_f32<T>(e[j] * inverse_sum);
        for (std::int64_t j = kept; j < n; ++j) o[j] = from_f32<T>(0.0f);
      }
    }
  });
}

void softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx) {
  const std::int64_t n = y.size(-1), rows = n == 0 ? 0 : y.numel() / n;
  visit_float_dtype(y.dtype(), [&]<class T>() {
#pragma omp parallel for if (rows * n > (1 << 15))
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* yr = y.data<T>() + r * n;
      const T* gr = dy.data<T>() + r * n;
      T* o = dx.data<T>() + r * n;
      float dot = 0.0f;
      for (std::int64_t j = 0; j < n; ++j) dot += to_f32(yr[j]) * to_f32(gr[j]);
      for (std::int64_t j = 0; j < n; ++j) o[j] = from_f32<T>(to_f32(yr[j]) * (to_f32(gr[j]) - dot));
    }
  });
}

void cross_entropy_forward(const Tensor& logits, const Tensor& targets, const Tensor& losses,
                           std::int64_t vocab_size, std::int64_t ignore_index) {
  const std::int64_t padded = logits.size(-1), rows = logits.size(0);
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t t = target_at(targets, r);
    require(t == ignore_index || (t >= 0 && t < vocab_size), "cross_entropy: target ", t, " at row ", r,
            " is outside the vocabulary [0, ", vocab_size, ")");
  }
  visit_float_dtype(logits.dtype(), [&]<class T>() {
    float* out = losses.data<float>();
#pragma omp parallel if (rows * vocab_size > (1 << 15))
    {
      Eigen::ArrayXf e;
#pragma omp for
      for (std::int64_t r = 0; r < rows; ++r) {
        const std::int64_t t = target_at(targets, r);
        const T* row = logits.data<T>() + r * padded;
        out[r] = t == ignore_index ? 0.0f : exp_row(row, vocab_size, e) - to_f32(row[t]);
      }
    }
  });
}

void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& dlosses, const Tensor& dlogits,
                            std::int64_t vocab_size, std::int64_t ignore_index) {
  const std::int64_t padded = logits.size(-1), rows = logits.size(0);
  visit_float_dtype(logits.dtype(), [&]<class T>() {
    const float* dloss = dlosses.data<float>();
#pragma omp parallel if (rows * vocab_size > (1 << 15))
    {
      Eigen::ArrayXf e;
#pragma omp for
      for (std::int64_t r = 0; r < rows; ++r) {
        const std::int64_t t = target_at(targets, r);
        const T* row = logits.data<T>() + r * padded;
        T* out = dlogits.data<T>() + r * padded;  // may be row itself: the row is read into e first
        if (t == ignore_index) {
          for (std::int64_t j = 0; j < padded; ++j) out[j] = from_f32<T>(0.0f);
          continue;
        }
        exp_row(row, vocab_size, e);
        const float scale = dloss[r] / e.sum();
        for (std::int64_t j = 0; j < vocab_size; ++j) {
          out[j] = from_f32<T>(e[j] * scale - (j == t ? dloss[r] : 0.0f));
        }
        for (std::int64_t j = vocab_size; j < padded; ++j) out[j] = from_f32<T>(0.0f);
      }
    }
  });
}

}  // namespace loom::kernels::cpu
