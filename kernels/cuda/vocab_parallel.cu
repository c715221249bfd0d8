// One rank's share of the vocabulary-parallel cross-entropy and embedding (loom/kernels/
// vocab_parallel.hpp) on the GPU. Cross-entropy: one block per row, the row read in chunks of 8
// (row_chunks.cuh), fp32 block reductions with a fixed tree (deterministic). Embedding: one thread
// per output element (plus the position embedding on the rank that adds it); its backward sorts the
// positions by token (embedding_grad.cuh) and adds each token's gradients in position order, as the
// CPU kernel does, never with atomics, and the position embedding's gradient as embedding.cu does.
#include "common.cuh"
#include "row_chunks.cuh"
#include "embedding_grad.cuh"
#include "vocab_parallel.hpp"

namespace loom::kernels::cuda {

namespace {

constexpr int threads = 256;

template <class Target>
__device__ std::int64_t target_of(const Target* targets, std::int64_t r) {
  return static_cast<std::int64_t>(targets[r]);
}

template <class T>
__global__ void max_kernel(const T* logits, float* row_max, std::int64_t width, std::int64_t valid, bool vector) {
  const std::int64_t r = blockIdx.x;
  float m = -INFINITY;
  for_own_chunks(valid, [&](std::int64_t k, int n) {
    float x[row_chunk];
    load_chunk(logits + r * width, k, n, vector, x);
#pragma unroll
    for (int e = 0; e < row_chunk; ++e) {
      if (e < n) m = fmaxf(m, x[e]);
    }
  });
  m = block_reduce<true>(m);
  if (threadIdx.x == 0) row_max[r] = m;
}

template <class T, class Target>
__global__ void sum_exp_kernel(const T* logits, const Target* targets, const float* row_max, float* partial,
                               std::int64_t width, std::int64_t valid, std::int64_t first, std::int64_t ignore,
                               bool vector) {
  const std::int64_t r = blockIdx.x;
  const float m = row_max[r];
  float sum = 0.0f;
  for_own_chunks(valid, [&](std::int64_t k, int n) {
    float x[row_chunk];
    load_chunk(logits + r * width, k, n, vector, x);
#pragma unroll
    for (int e = 0; e < row_chunk; ++e) {
      if (e < n) sum += expf(x[e] - m);
    }
  });
  sum = block_reduce(sum);
  if (threadIdx.x != 0) return;
  const std::int64_t t = target_of(targets, r), column = t - first;
  partial[2 * r] = sum;
  partial[2 * r + 1] = t != ignore && column >= 0 && column < valid ? to_f32(logits[r * width + column]) : 0.0f;
}

template <class Target>
__global__ void loss_kernel(const Target* targets, const float* row_max, const float* partial, float* losses,
                            std::int64_t rows, std::int64_t ignore) {
  for (std::int64_t r = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; r < rows;
       r += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    losses[r] = target_of(targets, r) == ignore ? 0.0f : logf(partial[2 * r]) + row_max[r] - partial[2 * r + 1];
  }
}

template <class T, class Target>
__global__ void backward_kernel(const T* logits, const Target* targets, const float* row_max, const float* partial,
                                const float* dlosses, T* dlogits, std::int64_t width, std::int64_t valid,
                                std::int64_t first, std::int64_t ignore, bool vector) {
  const std::int64_t r = blockIdx.x;
  const std::int64_t t = target_of(targets, r), column = t - first;
  const bool ignored = t == ignore;
  const float m = row_max[r], inverse = 1.0f / partial[2 * r], g = dlosses[r];
  // In place is safe: each element is read and written by the same thread.
  for_own_chunks(width, [&](std::int64_t k, int n) {
    float v[row_chunk];
    load_chunk(logits + r * width, k, n, vector, v);
#pragma unroll
    for (int e = 0; e < row_chunk; ++e) {
      const std::int64_t j = k * row_chunk + e;
      v[e] = ignored || j >= valid ? 0.0f : g * (expf(v[e] - m) * inverse - (j == column ? 1.0f : 0.0f));
    }
    store_chunk(dlogits + r * width, k, n, vector, v);
  });
}

template <class T>
__global__ void embedding_kernel(const std::int32_t* tokens, const T* wte, const T* wpe, T* out,
                                 std::int64_t positions, std::int64_t steps, std::int64_t channels, std::int64_t first,
                                 std::int64_t valid) {
  const std::int64_t n = positions * channels;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t p = i / channels, c = i % channels, row = static_cast<std::int64_t>(tokens[p]) - first;
    const bool mine = row >= 0 && row < valid;
    if (wpe == nullptr) {
      out[i] = mine ? wte[row * channels + c] : from_f32<T>(0.0f);
    } else {  // rounded once, as embedding_forward rounds the sum
      const float position = to_f32(wpe[(p % steps) * channels + c]);
      out[i] = from_f32<T>(mine ? to_f32(wte[row * channels + c]) + position : position);
    }
  }
}

}  // namespace

void vocab_parallel_max(const Tensor& logits, const Tensor& row_max, std::int64_t valid, void* stream) {
  const DeviceGuard guard(logits.device());
  const std::int64_t rows = logits.size(0), width = logits.size(1);
  if (rows == 0) return;
  visit_float_dtype(logits.dtype(), [&]<class T>() {
    max_kernel<T><<<static_cast<unsigned>(rows), row_threads(valid), 0, as_stream(stream)>>>(
        device_data<T>(logits), device_data<float>(row_max), width, valid, rows_vector_aligned(width, {logits.raw_data()}));
  });
  check_launch("vocab_parallel_max");
}

void vocab_parallel_sum_exp(const Tensor& logits, const Tensor& targets, const Tensor& row_max, const Tensor& partial,
                            const VocabShard& shard, std::int64_t valid, void* stream) {
  const DeviceGuard guard(logits.device());
  const std::int64_t rows = logits.size(0), width = logits.size(1);
  if (rows == 0) return;
  visit_float_dtype(logits.dtype(), [&]<class T>() {
    visit_target_dtype(targets.dtype(), [&]<class Target>() {
      sum_exp_kernel<T, Target><<<static_cast<unsigned>(rows), row_threads(valid), 0, as_stream(stream)>>>(
          device_data<T>(logits), device_data<Target>(targets), device_data<float>(row_max),
          device_data<float>(partial), width, valid, shard.first, shard.ignore_index,
          rows_vector_aligned(width, {logits.raw_data()}));
    });
  });
  check_launch("vocab_parallel_sum_exp");
}

void vocab_parallel_loss(const Tensor& targets, const Tensor& row_max, const Tensor& partial, const Tensor& losses,
                         const VocabShard& shard, void* stream) {
  const DeviceGuard guard(targets.device());
  const std::int64_t rows = targets.size(0);
  if (rows == 0) return;
  visit_target_dtype(targets.dtype(), [&]<class Target>() {
    loss_kernel<Target><<<grid_for(rows, threads), threads, 0, as_stream(stream)>>>(
        device_data<Target>(targets), device_data<float>(row_max), device_data<float>(partial),
        device_data<float>(losses), rows, shard.ignore_index);
  });
  check_launch("vocab_parallel_loss");
}

void vocab_parallel_backward(const Tensor& logits, const Tensor& targets, const Tensor& row_max, const Tensor& partial,
                             const Tensor& dlosses, const Tensor& dlogits, const VocabShard& shard, std::int64_t valid,
                             void* stream) {
  const DeviceGuard guard(logits.device());
  const std::int64_t rows = logits.size(0), width = logits.size(1);
  if (rows == 0) return;
  visit_float_dtype(logits.dtype(), [&]<class T>() {
    visit_target_dtype(targets.dtype(), [&]<class Target>() {
      backward_kernel<T, Target><<<static_cast<unsigned>(rows), row_threads(width), 0, as_stream(stream)>>>(
          device_data<T>(logits), device_data<Target>(targets), device_data<float>(row_max),
          device_data<float>(partial), device_data<float>(dlosses), device_data<T>(dlogits), width, valid, shard.first,
          shard.ignore_index, rows_vector_aligned(width, {logits.raw_data(), dlogits.raw_data()}));
    });
  });
  check_launch("vocab_parallel_backward");
}

void vocab_parallel_embedding_forward(const Tensor& tokens, const Tensor& wte_shard, const Tensor& wpe,
                                      const Tensor& out, const VocabShard& shard, std::int64_t valid, void* stream) {
  const DeviceGuard guard(wte_shard.device());
  const std::int64_t positions = tokens.numel(), channels = wte_shard.size(1);
  if (positions * channels == 0) return;
  visit_float_dtype(wte_shard.dtype(), [&]<class T>() {
    embedding_kernel<T><<<grid_for(positions * channels, threads), threads, 0, as_stream(stream)>>>(
        device_data<std::int32_t>(tokens), device_data<T>(wte_shard), wpe.defined() ? device_data<T>(wpe) : nullptr,
        device_data<T>(out), positions, tokens.size(1), channels, shard.first, valid);
  });
  check_launch("vocab_parallel_embedding_forward");
}

void vocab_parallel_embedding_backward(const Tensor& tokens, const Tensor& dout, const Tensor& dwte_shard,
                                       const Tensor& dwpe, const VocabShard& shard, std::int64_t valid, void* stream) {
  const DeviceGuard guard(dout.device());
  const std::int64_t positions = tokens.numel(), channels = dout.size(-1);
  if (positions == 0) return;
  const cudaStream_t s = as_stream(stream);
  const TokenSort sorted(tokens, shard.first, valid, s);
  visit_float_dtype(dout.dtype(), [&]<class T>() {
    if (dwpe.defined()) {
      const std::int64_t steps = tokens.size(1), batch = tokens.size(0);
      position_grad_kernel<T, float><<<grid_for(steps * channels, threads), threads, 0, s>>>(
          device_data<T>(dout), device_data<float>(dwpe), batch, steps, channels);
    }
    token_grad_kernel<T, float><<<static_cast<unsigned>(positions), threads, 0, s>>>(
        sorted.keys(), sorted.positions(), device_data<T>(dout), device_data<float>(dwte_shard), positions, valid,
        channels);
  });
  check_launch("vocab_parallel_embedding_backward");
}

}  // namespace loom::kernels::cuda
