// Softmax and the fused softmax cross-entropy on the CPU: rows in parallel through the variant's
// row loops (dispatch.hpp: max, exp and sums over 16 lanes in a fixed order). f16/bf16 rows pass
// through fp32 copies.
#include <type_traits>
#include <vector>

#include "kernels/cpu/dispatch.hpp"
#include "kernels/cpu/float_types.hpp"
#include "kernels/cpu/training.hpp"
#include "loom/core/error.hpp"

namespace loom::kernels::cpu {

namespace {

std::int64_t target_at(const Tensor& targets, std::int64_t r) {
  return targets.dtype() == DType::i32 ? targets.data<std::int32_t>()[r] : targets.data<std::int64_t>()[r];
}

// Calls body(r, in, out) for every row r of n elements, in parallel when big enough: in is the row
// as fp32, out an fp32 row whose contents are stored into out_rows afterwards (f32: both are the
// tensors' own rows; out_rows may be in_rows).
template <class T, class Body>
void for_rows(const T* in_rows, T* out_rows, std::int64_t rows, std::int64_t n, std::int64_t work, Body&& body) {
#pragma omp parallel if (work > (1 << 15))
  {
    std::vector<float> in(std::is_same_v<T, float> ? 0 : static_cast<std::size_t>(n)), out(in.size());
#pragma omp for
    for (std::int64_t r = 0; r < rows; ++r) {
      if constexpr (std::is_same_v<T, float>) {
        body(r, in_rows + r * n, out_rows + r * n);
      } else {
        to_f32(in_rows + r * n, in.data(), n);
        body(r, in.data(), out.data());
        from_f32(out.data(), out_rows + r * n, n);
      }
    }
  }
}

}  // namespace

void softmax_forward(const Tensor& x, const Tensor& out, bool causal) {
  const std::int64_t n = x.size(-1), rows = n == 0 ? 0 : x.numel() / n;
  const CpuKernels& k = cpu_kernels();
  visit_float_dtype(x.dtype(), [&]<class T>() {
    for_rows<T>(x.data<T>(), out.data<T>(), rows, n, rows * n, [&](std::int64_t r, const float* in, float* o) {
      k.softmax_forward(in, o, n, causal ? r % n + 1 : n, 1.0f);  // row t of a T x T block sees columns 0..t
    });
  });
}

void softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx) {
  const std::int64_t n = y.size(-1), rows = n == 0 ? 0 : y.numel() / n;
  const CpuKernels& k = cpu_kernels();
  visit_float_dtype(y.dtype(), [&]<class T>() {
    const T* grads = dy.data<T>();
    for_rows<T>(y.data<T>(), dx.data<T>(), rows, n, rows * n, [&](std::int64_t r, const float* yr, float* o) {
      if constexpr (std::is_same_v<T, float>) {
        k.softmax_backward(yr, grads + r * n, o, n, n);
      } else {
        std::vector<float> g(static_cast<std::size_t>(n));
        to_f32(grads + r * n, g.data(), n);
        k.softmax_backward(yr, g.data(), o, n, n);
      }
    });
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
  const CpuKernels& k = cpu_kernels();
  float* out = losses.data<float>();
  visit_float_dtype(logits.dtype(), [&]<class T>() {
#pragma omp parallel if (rows * vocab_size > (1 << 15))
    {
      std::vector<float> row(std::is_same_v<T, float> ? 0 : static_cast<std::size_t>(vocab_size));
#pragma omp for
      for (std::int64_t r = 0; r < rows; ++r) {
        const std::int64_t t = target_at(targets, r);
        if (t == ignore_index) {
          out[r] = 0.0f;
          continue;
        }
        const float* in = nullptr;
        if constexpr (std::is_same_v<T, float>) {
          in = logits.data<float>() + r * padded;
        } else {
          to_f32(logits.data<T>() + r * padded, row.data(), vocab_size);
          in = row.data();
        }
        out[r] = k.cross_entropy_forward(in, vocab_size, t);
      }
    }
  });
}

void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& dlosses, const Tensor& dlogits,
                            std::int64_t vocab_size, std::int64_t ignore_index) {
  const std::int64_t padded = logits.size(-1), rows = logits.size(0);
  const CpuKernels& k = cpu_kernels();
  const float* dloss = dlosses.data<float>();
  visit_float_dtype(logits.dtype(), [&]<class T>() {
    // dlogits may be logits itself: each row is read before it is written.
    for_rows<T>(logits.data<T>(), dlogits.data<T>(), rows, padded, rows * vocab_size,
                [&](std::int64_t r, const float* row, float* out) {
                  const std::int64_t t = target_at(targets, r);
                  if (t == ignore_index) {
                    for (std::int64_t j = 0; j < padded; ++j) out[j] = 0.0f;
                    return;
                  }
                  k.cross_entropy_backward(row, out, vocab_size, t, dloss[r]);
                  for (std::int64_t j = vocab_size; j < padded; ++j) out[j] = 0.0f;
                });
  });
}

void accumulate_mean(const Tensor& values, double divisor, const Tensor& out) {
  double sum = 0.0;
  for (const float v : values.span<float>()) sum += v;
  out.data<float>()[0] += static_cast<float>(sum / divisor);
}

}  // namespace loom::kernels::cpu
