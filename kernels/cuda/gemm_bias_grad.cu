// The GEMM bias-gradient reduction: bias_grad[i] = sum over batches and k of op(A)[i, k], one
// thread per i summing in a fixed order (deterministic; coalesced when A is transposed, the
// dW = dY^T X case).
#include "common.cuh"
#include "gemm.hpp"

namespace loom::kernels::cuda {

namespace {

template <class T>
__global__ void bias_grad_kernel(const T* a, std::int64_t ld, std::int64_t batch_stride, std::int64_t batch,
                                 std::int64_t m, std::int64_t k, bool trans_a, float* out) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i >= m) return;
  float sum = 0.0f;
  for (std::int64_t b = 0; b < batch; ++b) {
    const T* base = a + b * batch_stride;
    for (std::int64_t j = 0; j < k; ++j) sum += to_f32(trans_a ? base[j * ld + i] : base[i * ld + j]);
  }
  out[i] = sum;
}

}  // namespace

void gemm_bias_grad(const StridedMatrix& a, bool trans_a, const GemmShape& shape, const Tensor& bias_grad, void* stream) {
  const DeviceGuard guard(a.tensor.device());
  if (shape.m == 0) return;
  const std::int64_t stride = a.batch == 1 ? 0 : a.batch_stride;
  visit_float_dtype(a.tensor.dtype(), [&]<class T>() {
    bias_grad_kernel<T><<<static_cast<unsigned>((shape.m + 255) / 256), 256, 0, as_stream(stream)>>>(
        device_data<T>(a.tensor), a.ld, stride, shape.batch, shape.m, shape.k, trans_a, device_data<float>(bias_grad));
  });
  check_launch("gemm bias_grad");
}

}  // namespace loom::kernels::cuda
