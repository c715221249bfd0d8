// Softmax and fused cross-entropy: one block per row, rows read and written in chunks of 8 elements
// (16-byte accesses where aligned, row_chunks.cuh), fp32 block reductions (max, then the sum of
// exponentials), so no probability tensor is kept for cross-entropy.
#include "common.cuh"
#include "row_chunks.cuh"
#include "training.hpp"

namespace loom::kernels::cuda {

namespace {

constexpr int threads = 256;

// log(sum(exp(row[0..n)))) over the block.
template <class T>
__device__ float block_logsumexp(const T* row, std::int64_t n, bool vector) {
  float m = -INFINITY;
  for_own_chunks(n, [&](std::int64_t k, int valid) {
    float x[row_chunk];
    load_chunk(row, k, valid, vector, x);
#pragma unroll
    for (int e = 0; e < row_chunk; ++e) {
      if (e < valid) m = fmaxf(m, x[e]);
    }
  });
  m = block_reduce<true>(m);
  float sum = 0.0f;
  for_own_chunks(n, [&](std::int64_t k, int valid) {
    float x[row_chunk];
    load_chunk(row, k, valid, vector, x);
#pragma unroll
    for (int e = 0; e < row_chunk; ++e) {
      if (e < valid) sum += expf(x[e] - m);
    }
  });
  return m + logf(block_reduce(sum));
}

template <class T>
__device__ std::int64_t target_of(const T* targets, std::int64_t r) {
  return static_cast<std::int64_t>(targets[r]);
}

template <class T>
__global__ void softmax_forward_kernel(const T* x, T* out, std::int64_t n, bool causal, bool vector) {
  const std::int64_t r = blockIdx.x;
  const std::int64_t kept = causal ? r % n + 1 : n;
  const T* row = x + r * n;
  const float lse = block_logsumexp(row, kept, vector);
  // out may be x: each element is read and written by the same thread
  for_own_chunks(n, [&](std::int64_t k, int valid) {
    float v[row_chunk];
    load_chunk(row, k, valid, vector, v);
#pragma unroll
    for (int e = 0; e < row_chunk; ++e) v[e] = k * row_chunk + e < kept ? expf(v[e] - lse) : 0.0f;
    store_chunk(out + r * n, k, valid, vector, v);
  });
}

template <class T>
__global__ void softmax_backward_kernel(const T* y, const T* dy, T* dx, std::int64_t n, bool vector) {
  const std::int64_t r = blockIdx.x;
  float dot = 0.0f;
  for_own_chunks(n, [&](std::int64_t k, int valid) {
    float yv[row_chunk], g[row_chunk];
    load_chunk(y + r * n, k, valid, vector, yv);
    load_chunk(dy + r * n, k, valid, vector, g);
#pragma unroll
    for (int e = 0; e < row_chunk; ++e) {
      if (e < valid) dot += yv[e] * g[e];
    }
  });
  dot = block_reduce(dot);
  // dx may be dy: each element is read and written by the same thread
  for_own_chunks(n, [&](std::int64_t k, int valid) {
    float yv[row_chunk], g[row_chunk];
    load_chunk(y + r * n, k, valid, vector, yv);
    load_chunk(dy + r * n, k, valid, vector, g);
#pragma unroll
    for (int e = 0; e < row_chunk; ++e) yv[e] = yv[e] * (g[e] - dot);
    store_chunk(dx + r * n, k, valid, vector, yv);
  });
}

template <class T, class Target>
__global__ void cross_entropy_forward_kernel(const T* logits, const Target* targets, float* losses,
                                             std::int64_t padded, std::int64_t vocab, std::int64_t ignore,
                                             bool vector) {
  const std::int64_t r = blockIdx.x;
  const std::int64_t t = target_of(targets, r);
  if (t == ignore) {
    if (threadIdx.x == 0) losses[r] = 0.0f;
    return;
  }
  if (t < 0 || t >= vocab) {  // only when the caller said the targets were checked
    if (threadIdx.x == 0) losses[r] = NAN;
    return;
  }
  const T* row = logits + r * padded;
  const float lse = block_logsumexp(row, vocab, vector);
  if (threadIdx.x == 0) losses[r] = lse - to_f32(row[t]);
}

template <class T, class Target>
__global__ void cross_entropy_backward_kernel(const T* logits, const Target* targets, const float* dlosses, T* dlogits,
                                              std::int64_t padded, std::int64_t vocab, std::int64_t ignore,
                                              bool vector) {
  const std::int64_t r = blockIdx.x;
  const std::int64_t t = target_of(targets, r);
  const T* row = logits + r * padded;
  T* out = dlogits + r * padded;
  if (t == ignore) {
    for_own_chunks(padded, [&](std::int64_t k, int valid) {
      const float zeros[row_chunk] = {};
      store_chunk(out, k, valid, vector, zeros);
    });
    return;
  }
  const float lse = block_logsumexp(row, vocab, vector);
  const float g = dlosses[r];
  // In place is safe: each element is read and written by the same thread, after the reductions.
  for_own_chunks(padded, [&](std::int64_t k, int valid) {
    float v[row_chunk];
    load_chunk(row, k, valid, vector, v);
#pragma unroll
    for (int e = 0; e < row_chunk; ++e) {
      const std::int64_t j = k * row_chunk + e;
      v[e] = j < vocab ? g * (expf(v[e] - lse) - (j == t ? 1.0f : 0.0f)) : 0.0f;
    }
    store_chunk(out, k, valid, vector, v);
  });
}

// One block: each thread sums a strided subset in double, then a fixed tree over the threads.
__global__ void accumulate_mean_kernel(const float* values, std::int64_t n, double divisor, float* out) {
  __shared__ double partial[threads];
  double sum = 0.0;
  for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) sum += values[i];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int width = blockDim.x / 2; width > 0; width /= 2) {
    if (threadIdx.x < width) partial[threadIdx.x] += partial[threadIdx.x + width];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[0] += static_cast<float>(partial[0] / divisor);
}

}  // namespace

void softmax_forward(const Tensor& x, const Tensor& out, bool causal, void* stream) {
  const DeviceGuard guard(x.device());
  const std::int64_t n = x.size(-1), rows = n == 0 ? 0 : x.numel() / n;
  if (rows == 0) return;
  visit_float_dtype(x.dtype(), [&]<class T>() {
    softmax_forward_kernel<T><<<static_cast<unsigned>(rows), row_threads(n), 0, as_stream(stream)>>>(
        device_data<T>(x), device_data<T>(out), n, causal, rows_vector_aligned(n, {x.raw_data(), out.raw_data()}));
  });
  check_launch("softmax_forward");
}

void softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx, void* stream) {
  const DeviceGuard guard(y.device());
  const std::int64_t n = y.size(-1), rows = n == 0 ? 0 : y.numel() / n;
  if (rows == 0) return;
  visit_float_dtype(y.dtype(), [&]<class T>() {
    softmax_backward_kernel<T><<<static_cast<unsigned>(rows), row_threads(n), 0, as_stream(stream)>>>(
        device_data<T>(y), device_data<T>(dy), device_data<T>(dx), n,
        rows_vector_aligned(n, {y.raw_data(), dy.raw_data(), dx.raw_data()}));
  });
  check_launch("softmax_backward");
}

void cross_entropy_forward(const Tensor& logits, const Tensor& targets, const Tensor& losses, std::int64_t vocab_size,
                           std::int64_t ignore_index, void* stream) {
  const DeviceGuard guard(logits.device());
  const std::int64_t rows = logits.size(0), padded = logits.size(1);
  if (rows == 0) return;
  visit_float_dtype(logits.dtype(), [&]<class T>() {
    visit_target_dtype(targets.dtype(), [&]<class Target>() {
      cross_entropy_forward_kernel<T, Target><<<static_cast<unsigned>(rows), row_threads(padded), 0, as_stream(stream)>>>(
          device_data<T>(logits), device_data<Target>(targets), device_data<float>(losses), padded, vocab_size,
          ignore_index, rows_vector_aligned(padded, {logits.raw_data()}));
    });
  });
  check_launch("cross_entropy_forward");
}

void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& dlosses, const Tensor& dlogits,
                            std::int64_t vocab_size, std::int64_t ignore_index, void* stream) {
  const DeviceGuard guard(logits.device());
  const std::int64_t rows = logits.size(0), padded = logits.size(1);
  if (rows == 0) return;
  visit_float_dtype(logits.dtype(), [&]<class T>() {
    visit_target_dtype(targets.dtype(), [&]<class Target>() {
      cross_entropy_backward_kernel<T, Target><<<static_cast<unsigned>(rows), row_threads(padded), 0, as_stream(stream)>>>(
          device_data<T>(logits), device_data<Target>(targets), device_data<float>(dlosses), device_data<T>(dlogits),
          padded, vocab_size, ignore_index, rows_vector_aligned(padded, {logits.raw_data(), dlogits.raw_data()}));
    });
  });
  check_launch("cross_entropy_backward");
}

void accumulate_mean(const Tensor& values, double divisor, const Tensor& out, void* stream) {
  const DeviceGuard guard(values.device());
  accumulate_mean_kernel<<<1, threads, 0, as_stream(stream)>>>(device_data<float>(values), values.numel(), divisor,
                                                               device_data<float>(out));
  check_launch("accumulate_mean");
}

}  // namespace loom::kernels::cuda
