#include <cmath>

#include "kernels/cpu/float_types.hpp"
#include "kernels/cpu/training.hpp"

namespace loom::kernels::cpu {

namespace {
constexpr std::int64_t parallel_threshold = 1 << 15;
}  // namespace

// GELU in its sigmoid form, x * sigmoid(2z) with z = sqrt(2/pi) (x + 0.044715 x^3): equal to
// 0.5 x (1 + tanh z) without the cancellation of 1 + tanh z for negative x, and vectorized by
// Eigen's exp.
void gelu_forward(const Tensor& x, const Tensor& out) {
  visit_float_dtype(x.dtype(), [&]<class T>() {
    transform_chunks<T>(x.data<T>(), nullptr, out.data<T>(), x.numel(),
                        [](const Eigen::ArrayXf& in, const Eigen::ArrayXf&, Eigen::ArrayXf& result) {
                          const Eigen::ArrayXf z = 0.7978845608028654f * (in + 0.044715f * in.cube());
                          result = in / (1.0f + (-2.0f * z).exp());
                        });
  });
}

// d/dx [x s] = s + 2 x s (1 - s) dz/dx, with s = sigmoid(2z).
void gelu_backward(const Tensor& x, const Tensor& dout, const Tensor& dx) {
  visit_float_dtype(x.dtype(), [&]<class T>() {
    transform_chunks<T>(x.data<T>(), dout.data<T>(), dx.data<T>(), x.numel(),
                        [](const Eigen::ArrayXf& in, const Eigen::ArrayXf& grad, Eigen::ArrayXf& result) {
                          const float k = 0.7978845608028654f;
                          const Eigen::ArrayXf z = k * (in + 0.044715f * in.cube());
                          const Eigen::ArrayXf s = 1.0f / (1.0f + (-2.0f * z).exp());
                          const Eigen::ArrayXf dz = k * (1.0f + 3.0f * 0.044715f * in.square());
                          result = grad * (s + 2.0f * in * s * (1.0f - s) * dz);
                        });
  });
}

void residual_add(const Tensor& a, const Tensor& b, const Tensor& out) {
  visit_float_dtype(a.dtype(), [&]<class T>() {
    const T* x = a.data<T>();
    const T* y = b.data<T>();
    T* o = out.data<T>();
    const std::int64_t n = a.numel();
#pragma omp parallel for if (n > parallel_threshold)
    for (std::int64_t i = 0; i < n; ++i) o[i] = from_f32<T>(to_f32(x[i]) + to_f32(y[i]));
  });
}

}  // namespace loom::kernels::cpu
