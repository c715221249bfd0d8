// LayerNorm on the CPU: rows in parallel through the variant's row loops (dispatch.hpp); the
// parameter gradients sum over rows in order per channel, channels split between threads, so the
// sums do not depend on the thread count. f16/bf16 rows pass through fp32 copies.
#include <omp.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "kernels/cpu/dispatch.hpp"
#include "kernels/cpu/float_types.hpp"
#include "kernels/cpu/training.hpp"

namespace loom::kernels::cpu {

namespace {

constexpr std::int64_t rows_per_block = 16;

bool parallel(std::int64_t rows, std::int64_t channels) { return rows * channels > (1 << 15); }

template <class T>
std::vector<float> as_f32(const Tensor& t) {
  std::vector<float> out(static_cast<std::size_t>(t.numel()));
  to_f32(t.data<T>(), out.data(), t.numel());
  return out;
}

}  // namespace

void layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out,
                       const Tensor& mean, const Tensor& rstd, float eps) {
  const std::int64_t channels = x.size(-1), rows = x.numel() / channels;
  const std::int64_t blocks = (rows + rows_per_block - 1) / rows_per_block;
  const CpuKernels& k = cpu_kernels();
  visit_float_dtype(x.dtype(), [&]<class T>() {
    float* mean_out = mean.data<float>();
    float* rstd_out = rstd.data<float>();
    if constexpr (std::is_same_v<T, float>) {
#pragma omp parallel for if (parallel(rows, channels))
      for (std::int64_t blk = 0; blk < blocks; ++blk) {
        const std::int64_t r = blk * rows_per_block, count = std::min(rows_per_block, rows - r);
        k.layernorm_forward(x.data<float>() + r * channels, weight.data<float>(), bias.data<float>(),
                            out.data<float>() + r * channels, mean_out + r, rstd_out + r, count, channels, eps);
      }
    } else {
      const std::vector<float> w = as_f32<T>(weight), b = as_f32<T>(bias);
#pragma omp parallel if (parallel(rows, channels))
      {
        std::vector<float> row(static_cast<std::size_t>(channels)), result(row.size());
#pragma omp for
        for (std::int64_t r = 0; r < rows; ++r) {
          to_f32(x.data<T>() + r * channels, row.data(), channels);
          k.layernorm_forward(row.data(), w.data(), b.data(), result.data(), mean_out + r, rstd_out + r, 1, channels,
                              eps);
          from_f32(result.data(), out.data<T>() + r * channels, channels);
        }
      }
    }
  });
}

void layernorm_backward(const Tensor& dout, const Tensor& x, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd, const Tensor& residual, const Tensor& dx, const Tensor& dweight,
                        const Tensor& dbias) {
  const std::int64_t channels = x.size(-1), rows = x.numel() / channels;
  const std::int64_t blocks = (rows + rows_per_block - 1) / rows_per_block;
  const float* mean_in = mean.data<float>();
  const float* rstd_in = rstd.data<float>();
  const CpuKernels& k = cpu_kernels();
  std::vector<float> dw(static_cast<std::size_t>(channels)), db(dw.size());
  visit_float_dtype(x.dtype(), [&]<class T>() {
    // fp32 views of x, dout and the weight (copies for f16/bf16).
    std::vector<float> x_copy, g_copy, w_copy;
    const float *xs = nullptr, *gs = nullptr, *w = nullptr;
    if constexpr (std::is_same_v<T, float>) {
      xs = x.data<float>();
      gs = dout.data<float>();
      w = weight.data<float>();
    } else {
      x_copy = as_f32<T>(x);
      g_copy = as_f32<T>(dout);
      w_copy = as_f32<T>(weight);
      xs = x_copy.data();
      gs = g_copy.data();
      w = w_copy.data();
    }
    const bool threaded = parallel(rows, channels);
#pragma omp parallel if (threaded)
    {
      std::vector<float> result(std::is_same_v<T, float> ? 0 : static_cast<std::size_t>(rows_per_block * channels));
#pragma omp for
      for (std::int64_t blk = 0; blk < blocks; ++blk) {
        const std::int64_t r = blk * rows_per_block, count = std::min(rows_per_block, rows - r);
        if constexpr (std::is_same_v<T, float>) {
          const float* res = residual.defined() ? residual.data<float>() + r * channels : nullptr;
          k.layernorm_backward(gs + r * channels, xs + r * channels, w, mean_in + r, rstd_in + r, res,
                               dx.data<float>() + r * channels, count, channels);
        } else {
          k.layernorm_backward(gs + r * channels, xs + r * channels, w, mean_in + r, rstd_in + r, nullptr,
                               result.data(), count, channels);
          T* o = dx.data<T>() + r * channels;
          if (residual.defined()) {
            // Rounded to T first, then added as residual_add adds two T tensors: the same bits.
            const T* res = residual.data<T>() + r * channels;
            for (std::int64_t i = 0; i < count * channels; ++i) {
              o[i] = from_f32<T>(to_f32(res[i]) + to_f32(from_f32<T>(result[static_cast<std::size_t>(i)])));
            }
          } else {
            from_f32(result.data(), o, count * channels);
          }
        }
      }
      // Parameter gradients: each thread a range of whole 16-channel blocks, all rows in order.
      const int t = omp_get_thread_num(), parts = omp_get_num_threads();
      const std::int64_t lane_blocks = (channels + 15) / 16;
      const std::int64_t c0 = std::min(channels, lane_blocks * t / parts * 16);
      const std::int64_t c1 = std::min(channels, lane_blocks * (t + 1) / parts * 16);
      if (c1 > c0) {
        k.layernorm_param_grads(gs + c0, xs + c0, mean_in, rstd_in, rows, channels, c1 - c0, dw.data() + c0,
                                db.data() + c0);
      }
    }
  });
  auto accumulate = [channels](const Tensor& into, const std::vector<float>& add) {
    visit_float_dtype(into.dtype(), [&]<class G>() {
      G* p = into.data<G>();
      for (std::int64_t c = 0; c < channels; ++c) p[c] = from_f32<G>(to_f32(p[c]) + add[static_cast<std::size_t>(c)]);
    });
  };
  accumulate(dweight, dw);
  accumulate(dbias, db);
}

}  // namespace loom::kernels::cpu
