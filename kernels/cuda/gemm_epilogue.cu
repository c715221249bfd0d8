// GEMM epilogue pieces the cuBLASLt path cannot fuse: the bias-gradient reduction
// (bias_grad[i] = sum over batches and k of op(A)[i, k], one thread per i summing in a fixed
// order: deterministic, coalesced when A is transposed as in dW = dY^T X) and GELU applied from a
// contiguous pre-activation into a strided D.
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

template <class T>
__global__ void gelu_from_pre_kernel(const T* pre, T* d, std::int64_t d_ld, std::int64_t d_stride, std::int64_t batch,
                                     std::int64_t m, std::int64_t n) {
  const std::int64_t total = batch * m * n;
  for (std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t b = idx / (m * n), i = (idx / n) % m, j = idx % n;
    const float x = to_f32(pre[idx]);
    const float z = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    d[b * d_stride + i * d_ld + j] = from_f32<T>(x / (1.0f + __expf(-2.0f * z)));
  }
}

}  // namespace

void gemm_gelu_from_pre_activation(const Tensor& pre_activation, const StridedMatrix& d, const GemmShape& shape,
                                   void* stream) {
  const DeviceGuard guard(d.tensor.device());
  const std::int64_t total = shape.batch * shape.m * shape.n;
  if (total == 0) return;
  const std::int64_t stride = d.batch == 1 ? 0 : d.batch_stride;
  visit_float_dtype(d.tensor.dtype(), [&]<class T>() {
    gelu_from_pre_kernel<T><<<grid_for(total, 256), 256, 0, as_stream(stream)>>>(
        device_data<T>(pre_activation), device_data<T>(d.tensor), d.ld, stride, shape.batch, shape.m, shape.n);
  });
  check_launch("gemm GELU epilogue");
}

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
