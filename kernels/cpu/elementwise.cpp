#include <cmath>

#include "kernels/cpu/float_types.hpp"
#include "kernels/cpu/training.hpp"
#include "loom/kernels/activation.hpp"

namespace loom::kernels::cpu {

namespace {
constexpr std::int64_t parallel_threshold = 1 << 15;
}

void gelu_forward(const Tensor& x, const Tensor& out) {
  visit_float_dtype(x.dtype(), [&]<class T>() {
    const T* in = x.data<T>();
    T* o = out.data<T>();
    const std::int64_t n = x.numel();
#pragma omp parallel for if (n > parallel_threshold)
    for (std::int64_t i = 0; i < n; ++i) o[i] = from_f32<T>(gelu_tanh(to_f32(in[i])));
  });
}

void gelu_backward(const Tensor& x, const Tensor& dout, const Tensor& dx) {
  visit_float_dtype(x.dtype(), [&]<class T>() {
    const T* in = x.data<T>();
    const T* g = dout.data<T>();
    T* o = dx.data<T>();
    const std::int64_t n = x.numel();
#pragma omp parallel for if (n > parallel_threshold)
    for (std::int64_t i = 0; i < n; ++i) o[i] = from_f32<T>(to_f32(g[i]) * gelu_tanh_grad(to_f32(in[i])));
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
