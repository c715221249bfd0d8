// GELU and the residual add on the CPU: the variant's vector loops (dispatch.hpp) over fp32 chunks.
#include <algorithm>

#include "kernels/cpu/dispatch.hpp"
#include "kernels/cpu/float_types.hpp"
#include "kernels/cpu/training.hpp"

namespace loom::kernels::cpu {

void gelu_forward(const Tensor& x, const Tensor& out) {
  const CpuKernels& k = cpu_kernels();
  visit_float_dtype(x.dtype(), [&]<class T>() {
    map_chunks<T>(x.data<T>(), nullptr, out.data<T>(), x.numel(),
                  [&](const float* in, const float*, float* result, std::int64_t n) { k.gelu_forward(in, result, n); });
  });
}

void gelu_backward(const Tensor& x, const Tensor& dout, const Tensor& dx) {
  const CpuKernels& k = cpu_kernels();
  visit_float_dtype(x.dtype(), [&]<class T>() {
    map_chunks<T>(x.data<T>(), dout.data<T>(), dx.data<T>(), x.numel(),
                  [&](const float* in, const float* grad, float* result, std::int64_t n) {
                    k.gelu_backward(in, grad, result, n);
                  });
  });
}

// f32 only (checked by the public entry point): three inputs, so map_chunks's two do not fit; the
// same fixed chunks, so the thread count changes nothing.
void gelu_backward_from_output(const Tensor& x, const Tensor& y, const Tensor& dout, const Tensor& dx) {
  const CpuKernels& k = cpu_kernels();
  const float *xs = x.data<float>(), *ys = y.data<float>(), *grads = dout.data<float>();
  float* result = dx.data<float>();
  const std::int64_t n = x.numel();
  constexpr std::int64_t chunk = 2048;
  const std::int64_t chunks = (n + chunk - 1) / chunk;
#pragma omp parallel for if (n > (1 << 15))
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::int64_t begin = c * chunk;
    k.gelu_backward_from_output(xs + begin, ys + begin, grads + begin, result + begin, std::min(chunk, n - begin));
  }
}

void residual_add(const Tensor& a, const Tensor& b, const Tensor& out) {
  const CpuKernels& k = cpu_kernels();
  visit_float_dtype(a.dtype(), [&]<class T>() {
    map_chunks<T>(a.data<T>(), b.data<T>(), out.data<T>(), a.numel(),
                  [&](const float* x, const float* y, float* result, std::int64_t n) { k.add(x, y, result, n); });
  });
}

}  // namespace loom::kernels::cpu
