// GELU and the residual add on the CPU: the variant's vector loops (dispatch.hpp) over fp32 chunks.
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

void residual_add(const Tensor& a, const Tensor& b, const Tensor& out) {
  const CpuKernels& k = cpu_kernels();
  visit_float_dtype(a.dtype(), [&]<class T>() {
    map_chunks<T>(a.data<T>(), b.data<T>(), out.data<T>(), a.numel(),
                  [&](const float* x, const float* y, float* result, std::int64_t n) { k.add(x, y, result, n); });
  });
}

}  // namespace loom::kernels::cpu
