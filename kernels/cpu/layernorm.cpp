#include <cmath>
#include <vector>

#include "kernels/cpu/float_types.hpp"
#include "kernels/cpu/training.hpp"

namespace loom::kernels::cpu {

void layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out,
                       const Tensor& mean, const Tensor& rstd, float eps) {
  const std::int64_t channels = x.size(-1), rows = x.numel() / channels;
  visit_float_dtype(x.dtype(), [&]<class T>() {
    const T* in = x.data<T>();
    const T* w = weight.data<T>();
    const T* b = bias.data<T>();
    T* o = out.data<T>();
    float* mean_out = mean.data<float>();
    float* rstd_out = rstd.data<float>();
#pragma omp parallel for if (rows * channels > (1 << 15))
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* row = in + r * channels;
      float sum = 0.0f;
      for (std::int64_t c = 0; c < channels; ++c) sum += to_f32(row[c]);
      const float m = sum / static_cast<float>(channels);
      float squares = 0.0f;
      for (std::int64_t c = 0; c < channels; ++c) {
        const float d = to_f32(row[c]) - m;
        squares += d * d;
      }
      const float s = 1.0f / std::sqrt(squares / static_cast<float>(channels) + eps);
      for (std::int64_t c = 0; c < channels; ++c) {
        o[r * channels + c] = from_f32<T>((to_f32(row[c]) - m) * s * to_f32(w[c]) + to_f32(b[c]));
      }
      mean_out[r] = m;
      rstd_out[r] = s;
    }
  });
}

void layernorm_backward(const Tensor& dout, const Tensor& x, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dx, const Tensor& dweight, const Tensor& dbias) {
  const std::int64_t channels = x.size(-1), rows = x.numel() / channels;
  const float* mean_in = mean.data<float>();
  const float* rstd_in = rstd.data<float>();
  std::vector<float> dw(static_cast<std::size_t>(channels), 0.0f), db(static_cast<std::size_t>(channels), 0.0f);
  visit_float_dtype(x.dtype(), [&]<class T>() {
    const T* in = x.data<T>();
    const T* g = dout.data<T>();
    const T* w = weight.data<T>();
    T* o = dx.data<T>();
#pragma omp parallel for if (rows * channels > (1 << 15))
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* xr = in + r * channels;
      const T* gr = g + r * channels;
      float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
      for (std::int64_t c = 0; c < channels; ++c) {
        const float norm = (to_f32(xr[c]) - mean_in[r]) * rstd_in[r];
        const float dnorm = to_f32(gr[c]) * to_f32(w[c]);
        dnorm_mean += dnorm;
        dnorm_norm_mean += dnorm * norm;
      }
      dnorm_mean /= static_cast<float>(channels);
      dnorm_norm_mean /= static_cast<float>(channels);
      for (std::int64_t c = 0; c < channels; ++c) {
        const float norm = (to_f32(xr[c]) - mean_in[r]) * rstd_in[r];
        const float dnorm = to_f32(gr[c]) * to_f32(w[c]);
        o[r * channels + c] = from_f32<T>((dnorm - dnorm_mean - norm * dnorm_norm_mean) * rstd_in[r]);
      }
    }
    // Parameter gradients: rows in order, so the sums are deterministic.
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t c = 0; c < channels; ++c) {
        const float norm = (to_f32(in[r * channels + c]) - mean_in[r]) * rstd_in[r];
        const float gv = to_f32(g[r * channels + c]);
        dw[static_cast<std::size_t>(c)] += norm * gv;
        db[static_cast<std::size_t>(c)] += gv;
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
