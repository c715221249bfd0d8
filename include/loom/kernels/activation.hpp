// Scalar activation functions shared by the CPU kernels and the GEMM epilogues, so every path
// computes GELU the same way.
#pragma once

#include <cmath>

namespace loom::kernels {

// GELU, tanh approximation (GPT-2): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
template <class T>
T gelu_tanh(T x) {
  const T k = static_cast<T>(0.7978845608028654);  // sqrt(2 / pi)
  const T inner = k * (x + static_cast<T>(0.044715) * x * x * x);
  return static_cast<T>(0.5) * x * (static_cast<T>(1) + std::tanh(inner));
}

// d gelu_tanh(x) / dx.
template <class T>
T gelu_tanh_grad(T x) {
  const T k = static_cast<T>(0.7978845608028654);
  const T inner = k * (x + static_cast<T>(0.044715) * x * x * x);
  const T t = std::tanh(inner);
  const T d_inner = k * (static_cast<T>(1) + static_cast<T>(3 * 0.044715) * x * x);
  return static_cast<T>(0.5) * (static_cast<T>(1) + t) + static_cast<T>(0.5) * x * (static_cast<T>(1) - t * t) * d_inner;
}

}  // namespace loom::kernels
