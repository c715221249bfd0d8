// Scalar GELU and its derivative, in the form every loom GELU computes. The CPU kernels and GEMM
// epilogues evaluate it with their own vector exp (kernels/cpu/isa_kernels.hpp: within 2 ulp of
// std::exp, and 0 for x below about -9.67, where this gives under 1e-33).
#pragma once

#include <cmath>

namespace loom::kernels {

// GELU, tanh approximation (GPT-2): 0.5 x (1 + tanh(z)), z = sqrt(2/pi) (x + 0.044715 x^3),
// computed as x * sigmoid(2z), which is the same function without the cancellation in 1 + tanh z
// for negative x.
template <class T>
T gelu_tanh(T x) {
  const T z = static_cast<T>(0.7978845608028654) * (x + static_cast<T>(0.044715) * x * x * x);
  return x / (static_cast<T>(1) + std::exp(static_cast<T>(-2) * z));
}

// d gelu_tanh(x) / dx = s + 2 x s (1 - s) dz/dx with s = sigmoid(2z).
template <class T>
T gelu_tanh_grad(T x) {
  const T k = static_cast<T>(0.7978845608028654);
  const T z = k * (x + static_cast<T>(0.044715) * x * x * x);
  const T s = static_cast<T>(1) / (static_cast<T>(1) + std::exp(static_cast<T>(-2) * z));
  const T dz = k * (static_cast<T>(1) + static_cast<T>(3 * 0.044715) * x * x);
  return s + static_cast<T>(2) * x * s * (static_cast<T>(1) - s) * dz;
}

}  // namespace loom::kernels
