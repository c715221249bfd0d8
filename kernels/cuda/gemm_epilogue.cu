// GEMM epilogue pieces the cuBLASLt path cannot fuse: the bias-gradient reduction
// (bias_grad[i] = sum over batches and k of op(A)[i, k]), GELU applied from a contiguous
// pre-activation into a strided D, and the whole epilogue of a GEMM with K = 0 (D = beta C + bias,
// GELU), which cuBLASLt is not asked for. The bias gradient is deterministic without atomics: with A
// transposed (dW = dY^T X, the training case) blocks of columns x chunks of rows write partial
// sums in row order, then one pass adds the chunks in order; otherwise one block reduces each
// row with a fixed tree.
#include "common.cuh"
#include "gemm.hpp"
#include "gemm_kernel_common.cuh"

namespace loom::kernels::cuda {

namespace {

constexpr int bias_threads = 256;
constexpr std::int64_t bias_min_rows_per_chunk = 64;
constexpr std::int64_t bias_max_chunks = 65535;  // gridDim.y limit

// Element (i, r) of op(A) when A is transposed: r runs over batch * k rows of A, i over columns.
template <class T>
__device__ __forceinline__ float transposed_at(const T* a, std::int64_t ld, std::int64_t batch_stride, std::int64_t k,
                                               std::int64_t r, std::int64_t i) {
  return to_f32(a[(r / k) * batch_stride + (r % k) * ld + i]);
}

// partial[chunk][i] = sum of op(A)[i, r] over the chunk's rows r, in order (grid: column blocks x chunks).
template <class T>
__global__ void bias_grad_partials(const T* a, std::int64_t ld, std::int64_t batch_stride, std::int64_t rows,
                                   std::int64_t m, std::int64_t k, std::int64_t rows_per_chunk, float* partial) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i >= m) return;
  const std::int64_t r0 = blockIdx.y * rows_per_chunk, r1 = min(rows, r0 + rows_per_chunk);
  float sum = 0.0f;
  for (std::int64_t r = r0; r < r1; ++r) sum += transposed_at(a, ld, batch_stride, k, r, i);
  partial[blockIdx.y * m + i] = sum;
}

__global__ void bias_grad_chunks(const float* partial, std::int64_t chunks, std::int64_t m, float* out) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i >= m) return;
  float sum = 0.0f;
  for (std::int64_t c = 0; c < chunks; ++c) sum += partial[c * m + i];
  out[i] = sum;
}

// One block per row i of op(A) = A: the batch * k entries by a strided loop, then a fixed tree.
template <class T>
__global__ void bias_grad_rows(const T* a, std::int64_t ld, std::int64_t batch_stride, std::int64_t batch,
                               std::int64_t k, float* out) {
  const std::int64_t i = blockIdx.x;
  float sum = 0.0f;
  for (std::int64_t r = threadIdx.x; r < batch * k; r += blockDim.x) {
    sum += to_f32(a[(r / k) * batch_stride + i * ld + r % k]);
  }
  sum = block_reduce(sum);
  if (threadIdx.x == 0) out[i] = sum;
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

// D[b, i, j] for K = 0: loom's kernels' epilogue on a zero product.
template <class In, class Out>
__global__ void empty_k_kernel(gemm_detail::Output out, gemm_detail::Epilogue e, std::int64_t batch) {
  const std::int64_t total = batch * out.m * out.n;
  for (std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t b = idx / (out.m * out.n), i = (idx / out.n) % out.m, j = idx % out.n;
    gemm_detail::store_result<In, Out>(out, e, b, i, j, 0.0f);
  }
}

}  // namespace

void gemm_empty_k(const std::optional<StridedMatrix>& c, const StridedMatrix& d, const GemmOptions& options,
                  const GemmShape& shape, void* stream) {
  const DeviceGuard guard(d.tensor.device());
  const std::int64_t total = shape.batch * shape.m * shape.n;
  if (total == 0) return;
  const gemm_detail::Output out = gemm_detail::output_of(d, shape);
  const gemm_detail::Epilogue e = gemm_detail::epilogue_of(c, options);
  const auto launch = [&]<class In>() {
    const auto run = [&]<class Out>() {
      empty_k_kernel<In, Out><<<grid_for(total, 256), 256, 0, as_stream(stream)>>>(out, e, shape.batch);
    };
    if (d.tensor.dtype() == DType::f32) run.template operator()<float>();
    else run.template operator()<In>();  // D is f32 or the input dtype (validated)
  };
  switch (input_dtype(options.precision)) {
    case DType::f16: launch.template operator()<__half>(); break;
    case DType::bf16: launch.template operator()<__nv_bfloat16>(); break;
    default: launch.template operator()<float>(); break;
  }
  check_launch("gemm epilogue for K = 0");
}

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
  const cudaStream_t s = as_stream(stream);
  float* out = device_data<float>(bias_grad);
  const std::int64_t stride = a.batch == 1 ? 0 : a.batch_stride, rows = shape.batch * shape.k;
  if (rows == 0) {
    check(cudaMemsetAsync(out, 0, static_cast<std::size_t>(shape.m) * sizeof(float), s), "gemm bias_grad: zeroing");
    return;
  }
  visit_float_dtype(a.tensor.dtype(), [&]<class T>() {
    const T* data = device_data<T>(a.tensor);
    if (!trans_a) {
      bias_grad_rows<T><<<static_cast<unsigned>(shape.m), bias_threads, 0, s>>>(data, a.ld, stride, shape.batch,
                                                                               shape.k, out);
      return;
    }
    const std::int64_t rows_per_chunk =
        std::max(bias_min_rows_per_chunk, (rows + bias_max_chunks - 1) / bias_max_chunks);
    const std::int64_t chunks = (rows + rows_per_chunk - 1) / rows_per_chunk;
    const StreamScratch partials(static_cast<std::size_t>(chunks * shape.m) * sizeof(float), s);
    const auto column_blocks = static_cast<unsigned>((shape.m + bias_threads - 1) / bias_threads);
    bias_grad_partials<T><<<dim3(column_blocks, static_cast<unsigned>(chunks)), bias_threads, 0, s>>>(
        data, a.ld, stride, rows, shape.m, shape.k, rows_per_chunk, partials.as<float>());
    bias_grad_chunks<<<column_blocks, bias_threads, 0, s>>>(partials.as<float>(), chunks, shape.m, out);
  });
  check_launch("gemm bias_grad");
}

}  // namespace loom::kernels::cuda
