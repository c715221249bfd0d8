// Fused causal attention on CUDA: no T x T matrix in global memory. Tiles of 16 query rows and
// 16 key rows are staged in shared memory as fp32; a block of 256 threads computes one 16 x 16
// score tile at a time, one score per thread, and the 16 threads of a score row reduce it with
// shuffles in a fixed pattern.
//   forward: per query tile, an online softmax over the key tiles (running max, sum and
//            output), writing out and each row's log-sum-exp.
//   backward: delta_t = dO_t . O_t; then one kernel per key tile accumulating dK and dV over
//            the query tiles, and one per query tile accumulating dQ over the key tiles. Both
//            recompute P from the log-sum-exp. No atomics: every output element is written by
//            one thread after a loop in fixed order, so results are deterministic.
// Arithmetic is fp32 on CUDA cores. f16/bf16 with head size 64 or 128 (aligned) go to the
// tensor-core kernels of attention_mma.cu instead; this file keeps every other case.
#include "attention_mma.hpp"
#include "common.cuh"
#include "training.hpp"

namespace loom::kernels::cuda {

namespace {

constexpr int tile = 16;              // query and key rows per tile
constexpr int threads = tile * tile;  // one score per thread
constexpr int max_head = 128;
constexpr int pad = max_head + 1;  // row stride of the staged tiles: no bank conflicts between rows
constexpr int per_thread = max_head / tile;  // output dimensions each thread of a row group owns

struct Layout {
  std::int64_t steps, channels;
  int heads, head_size;
  float scale;
};

// rows [row0, row0 + tile) of one head (head_size columns) from a tensor with leading dimension
// ld, as fp32; rows at or past `steps` read as zero.
template <class T>
__device__ void load_tile(float (*dst)[pad], const T* src, std::int64_t ld, std::int64_t row0, std::int64_t steps,
                          int head_size) {
  for (int idx = threadIdx.x; idx < tile * head_size; idx += blockDim.x) {
    const int r = idx / head_size, c = idx % head_size;
    const std::int64_t row = row0 + r;
    dst[r][c] = row < steps ? to_f32(src[row * ld + c]) : 0.0f;
  }
}

__device__ __forceinline__ float dot(const float* a, const float* b, int n) {
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) sum = fmaf(a[i], b[i], sum);
  return sum;
}

// The key and value tiles starting at key k0 of the head whose q starts at qs, once every thread
// is done with the previous ones; every thread sees them on return.
template <class T>
__device__ void load_key_tiles(float (*k)[pad], float (*v)[pad], const T* qs, std::int64_t k0, const Layout& d) {
  __syncthreads();
  load_tile(k, qs + d.channels, 3 * d.channels, k0, d.steps, d.head_size);
  load_tile(v, qs + 2 * d.channels, 3 * d.channels, k0, d.steps, d.head_size);
  __syncthreads();
}

// Max or sum over the 16 threads of one score row (lanes 0-15 or 16-31 of a warp).
__device__ __forceinline__ float row_max(float v) {
  for (int offset = tile / 2; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}
__device__ __forceinline__ float row_sum(float v) {
  for (int offset = tile / 2; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// The (sequence, head) of this block: blockIdx.y = b * heads + h. Pointers to q, k, v of the
// head in qkv (leading dimension 3C) and to the head in a [B, T, C] tensor.
struct Head {
  std::int64_t pair, qkv_offset, out_offset;
  __device__ explicit Head(const Layout& d)
      : pair(blockIdx.y),
        qkv_offset((pair / d.heads) * d.steps * 3 * d.channels + (pair % d.heads) * d.head_size),
        out_offset((pair / d.heads) * d.steps * d.channels + (pair % d.heads) * d.head_size) {}
};

template <class T>
__global__ void __launch_bounds__(threads) forward_kernel(const T* qkv, T* out, float* lse, Layout d) {
  __shared__ float q[tile][pad], k[tile][pad], v[tile][pad];
  __shared__ float p[tile][tile + 1];
  const Head head(d);
  const std::int64_t width = 3 * d.channels, q0 = static_cast<std::int64_t>(blockIdx.x) * tile;
  const T* qs = qkv + head.qkv_offset;
  const int r = threadIdx.x / tile, c = threadIdx.x % tile;
  const std::int64_t query = q0 + r;
  load_tile(q, qs, width, q0, d.steps, d.head_size);
  float m = -INFINITY, l = 0.0f, acc[per_thread] = {};
  const std::int64_t last_key = min(d.steps, q0 + tile) - 1;
  for (std::int64_t k0 = 0; k0 <= last_key; k0 += tile) {
    load_key_tiles(k, v, qs, k0, d);
    const std::int64_t key = k0 + c;
    const bool visible = key <= query && key < d.steps;
    const float s = visible ? dot(q[r], k[c], d.head_size) * d.scale : -INFINITY;
    // Every row sees key 0 in the first tile, so m_new is finite from the start.
    const float m_new = fmaxf(m, row_max(s));
    const float e = visible ? expf(s - m_new) : 0.0f;
    const float alpha = expf(m - m_new);
    l = l * alpha + row_sum(e);
    m = m_new;
    p[r][c] = e;
    __syncwarp();  // row r of p is written and read by the same 16 lanes
#pragma unroll
    for (int i = 0; i < per_thread; ++i) {
      const int dim = c + tile * i;
      if (dim >= d.head_size) break;
      float sum = 0.0f;
      for (int j = 0; j < tile; ++j) sum = fmaf(p[r][j], v[j][dim], sum);
      acc[i] = acc[i] * alpha + sum;
    }
    __syncwarp();
  }
  if (query >= d.steps) return;
  const float inverse = 1.0f / l;
  T* o = out + head.out_offset + query * d.channels;
#pragma unroll
  for (int i = 0; i < per_thread; ++i) {
    const int dim = c + tile * i;
    if (dim < d.head_size) o[dim] = from_f32<T>(acc[i] * inverse);
  }
  if (c == 0) lse[head.pair * d.steps + query] = m + logf(l);
}

// delta[pair, t] = dO_t . O_t for each row of each head, one warp per row (grid-stride).
template <class T>
__global__ void delta_kernel(const T* dout, const T* out, float* delta, Layout d, std::int64_t rows) {
  const int lane = threadIdx.x % 32;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * blockDim.x / 32;
  for (std::int64_t row = (blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x) / 32; row < rows;
       row += warps) {
    const std::int64_t pair = row / d.steps, t = row % d.steps;
    const std::int64_t base =
        (pair / d.heads) * d.steps * d.channels + t * d.channels + (pair % d.heads) * d.head_size;
    float sum = 0.0f;
    for (int i = lane; i < d.head_size; i += 32) sum += to_f32(dout[base + i]) * to_f32(out[base + i]);
    sum = warp_sum(sum);
    if (lane == 0) delta[row] = sum;
  }
}

// The probability and score gradient at (query, key) from the staged tiles (shared by both
// backward kernels, so both see the same values).
struct ScoreGrad {
  float p, ds;
};
__device__ __forceinline__ ScoreGrad score_grad(const float* q, const float* k, const float* v, const float* dy,
                                                float row_lse, float row_delta, bool visible, const Layout& d) {
  if (!visible) return {0.0f, 0.0f};
  const float p = expf(dot(q, k, d.head_size) * d.scale - row_lse);
  return {p, p * (dot(dy, v, d.head_size) - row_delta) * d.scale};
}

// One block per key tile: dK and dV over every query tile at or after it.
template <class T>
__global__ void __launch_bounds__(threads)
    dkv_kernel(const T* qkv, const T* dout, const float* lse, const float* delta, T* dqkv, Layout d) {
  __shared__ float q[tile][pad], dy[tile][pad], k[tile][pad], v[tile][pad];
  __shared__ float p[tile][tile + 1], ds[tile][tile + 1];
  __shared__ float row_lse[tile], row_delta[tile];
  const Head head(d);
  const std::int64_t width = 3 * d.channels, k0 = static_cast<std::int64_t>(blockIdx.x) * tile;
  const T* qs = qkv + head.qkv_offset;
  const int r = threadIdx.x / tile, c = threadIdx.x % tile;  // score (query r, key c)
  load_tile(k, qs + d.channels, width, k0, d.steps, d.head_size);
  load_tile(v, qs + 2 * d.channels, width, k0, d.steps, d.head_size);
  float dk[per_thread] = {}, dv[per_thread] = {};  // key row r of the tile, dimensions c + 16 i
  for (std::int64_t q0 = k0; q0 < d.steps; q0 += tile) {
    __syncthreads();
    load_tile(q, qs, width, q0, d.steps, d.head_size);
    load_tile(dy, dout + head.out_offset, d.channels, q0, d.steps, d.head_size);
    if (threadIdx.x < tile) {
      const std::int64_t row = q0 + threadIdx.x;
      row_lse[threadIdx.x] = row < d.steps ? lse[head.pair * d.steps + row] : 0.0f;
      row_delta[threadIdx.x] = row < d.steps ? delta[head.pair * d.steps + row] : 0.0f;
    }
    __syncthreads();
    const std::int64_t query = q0 + r, key = k0 + c;
    const ScoreGrad g = score_grad(q[r], k[c], v[c], dy[r], row_lse[r], row_delta[r],
                                   key <= query && query < d.steps && key < d.steps, d);
    p[r][c] = g.p;
    ds[r][c] = g.ds;
    __syncthreads();
#pragma unroll
    for (int i = 0; i < per_thread; ++i) {
      const int dim = c + tile * i;
      if (dim >= d.head_size) break;
      float sum_v = 0.0f, sum_k = 0.0f;
      for (int j = 0; j < tile; ++j) {
        sum_v = fmaf(p[j][r], dy[j][dim], sum_v);
        sum_k = fmaf(ds[j][r], q[j][dim], sum_k);
      }
      dv[i] += sum_v;
      dk[i] += sum_k;
    }
  }
  const std::int64_t key = k0 + r;
  if (key >= d.steps) return;
  T* row = dqkv + head.qkv_offset + key * width;
#pragma unroll
  for (int i = 0; i < per_thread; ++i) {
    const int dim = c + tile * i;
    if (dim >= d.head_size) break;
    row[d.channels + dim] = from_f32<T>(dk[i]);
    row[2 * d.channels + dim] = from_f32<T>(dv[i]);
  }
}

// One block per query tile: dQ over every key tile at or before it.
template <class T>
__global__ void __launch_bounds__(threads)
    dq_kernel(const T* qkv, const T* dout, const float* lse, const float* delta, T* dqkv, Layout d) {
  __shared__ float q[tile][pad], dy[tile][pad], k[tile][pad], v[tile][pad];
  __shared__ float ds[tile][tile + 1];
  const Head head(d);
  const std::int64_t width = 3 * d.channels, q0 = static_cast<std::int64_t>(blockIdx.x) * tile;
  const T* qs = qkv + head.qkv_offset;
  const int r = threadIdx.x / tile, c = threadIdx.x % tile;
  const std::int64_t query = q0 + r;
  load_tile(q, qs, width, q0, d.steps, d.head_size);
  load_tile(dy, dout + head.out_offset, d.channels, q0, d.steps, d.head_size);
  const float own_lse = query < d.steps ? lse[head.pair * d.steps + query] : 0.0f;
  const float own_delta = query < d.steps ? delta[head.pair * d.steps + query] : 0.0f;
  float dq[per_thread] = {};
  const std::int64_t last_key = min(d.steps, q0 + tile) - 1;
  for (std::int64_t k0 = 0; k0 <= last_key; k0 += tile) {
    load_key_tiles(k, v, qs, k0, d);
    const std::int64_t key = k0 + c;
    ds[r][c] = score_grad(q[r], k[c], v[c], dy[r], own_lse, own_delta, key <= query && query < d.steps && key < d.steps,
                          d)
                   .ds;
    __syncwarp();  // row r of ds is written and read by the same 16 lanes
#pragma unroll
    for (int i = 0; i < per_thread; ++i) {
      const int dim = c + tile * i;
      if (dim >= d.head_size) break;
      float sum = 0.0f;
      for (int j = 0; j < tile; ++j) sum = fmaf(ds[r][j], k[j][dim], sum);
      dq[i] += sum;
    }
    __syncwarp();
  }
  if (query >= d.steps) return;
  T* row = dqkv + head.qkv_offset + query * width;
#pragma unroll
  for (int i = 0; i < per_thread; ++i) {
    const int dim = c + tile * i;
    if (dim < d.head_size) row[dim] = from_f32<T>(dq[i]);
  }
}

Layout layout_of(const Tensor& qkv, std::int64_t heads) {
  Layout d{};
  d.steps = qkv.size(1);
  d.channels = qkv.size(2) / 3;
  d.heads = static_cast<int>(heads);
  d.head_size = static_cast<int>(d.channels / heads);
  d.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d.head_size)));
  return d;
}

dim3 tiles_grid(const Tensor& qkv, const Layout& d) {
  require(qkv.size(0) * d.heads <= 65535, "fused attention: ", qkv.size(0), " sequences x ", d.heads,
          " heads exceed the grid limit of 65535");
  return dim3(static_cast<unsigned>((d.steps + tile - 1) / tile), static_cast<unsigned>(qkv.size(0) * d.heads));
}

}  // namespace

void fused_attention_forward(const Tensor& qkv, const Tensor& out, const Tensor& lse, std::int64_t heads,
                             void* stream) {
  if (attention_mma_applies(qkv, heads, {&qkv, &out})) {
    attention_mma_forward(qkv, out, lse, heads, stream);
    return;
  }
  const DeviceGuard guard(qkv.device());
  const Layout d = layout_of(qkv, heads);
  const dim3 grid = tiles_grid(qkv, d);
  visit_float_dtype(qkv.dtype(), [&]<class T>() {
    forward_kernel<T><<<grid, threads, 0, as_stream(stream)>>>(device_data<T>(qkv), device_data<T>(out),
                                                               device_data<float>(lse), d);
  });
  check_launch("fused_attention_forward");
}

void fused_attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                              const Tensor& dqkv, std::int64_t heads, void* stream) {
  const DeviceGuard guard(qkv.device());
  const Layout d = layout_of(qkv, heads);
  const dim3 grid = tiles_grid(qkv, d);
  const cudaStream_t s = as_stream(stream);
  const std::int64_t rows = qkv.size(0) * d.heads * d.steps;
  const StreamScratch delta(static_cast<std::size_t>(rows) * sizeof(float), s);
  const bool tensor_cores = attention_mma_applies(qkv, heads, {&dout, &qkv, &dqkv});
  visit_float_dtype(qkv.dtype(), [&]<class T>() {
    delta_kernel<T><<<grid_for(rows * 32, 256), 256, 0, s>>>(device_data<T>(dout), device_data<T>(out),
                                                            delta.as<float>(), d, rows);
    if (tensor_cores) return;
    dkv_kernel<T><<<grid, threads, 0, s>>>(device_data<T>(qkv), device_data<T>(dout), device_data<float>(lse),
                                          delta.as<float>(), device_data<T>(dqkv), d);
    dq_kernel<T><<<grid, threads, 0, s>>>(device_data<T>(qkv), device_data<T>(dout), device_data<float>(lse),
                                         delta.as<float>(), device_data<T>(dqkv), d);
  });
  check_launch("fused_attention_backward");
  if (tensor_cores) attention_mma_backward(dout, qkv, lse, delta.as<float>(), dqkv, heads, stream);
}

}  // namespace loom::kernels::cuda
