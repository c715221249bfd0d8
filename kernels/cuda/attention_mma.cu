// Fused causal attention on tensor cores: FlashAttention-2's algorithm with mma.sync m16n8k16
// (f16/bf16 inputs, fp32 accumulation), head size 64 or 128. Blocks of 4 warps; each warp owns 16
// rows of a 64-row tile (queries in forward and dQ, keys in dK/dV), the other operand's tiles are
// staged in shared memory with cp.async and read with ldmatrix. The score accumulators become the
// next product's A fragments in registers (rounded to the storage dtype, as FlashAttention does),
// so no score leaves the warp.
//   forward: per query tile, an online softmax in base 2 over key tiles of 64; out and each row's
//            log-sum-exp (natural log).
//   backward: per key tile, dK and dV over query tiles of 32 at or after it (S^T = K Q^T and
//            dP^T = V dO^T, so P^T and dS^T are already A fragments); per query tile, dQ over
//            the key tiles at or before it. delta = dO . O comes from fused_attention.cu.
// Every output element is written once, after sums in a fixed order: deterministic, no atomics.
#include "attention_mma.hpp"

#include <cmath>
#include <cstring>

#include "common.cuh"
#include "mma_common.cuh"

namespace loom::kernels::cuda {

namespace {

constexpr int warps = 4, threads = 32 * warps;
constexpr int block_rows = 16 * warps;  // queries (forward, dQ) or keys (dK/dV) per block
constexpr int key_tile = 64;            // keys per step of the forward and dQ loops
constexpr int query_tile = 32;          // queries per step of the dK/dV loop
constexpr float log2e = 1.4426950408889634f;

// Elements per staged row: rows 4 banks apart, so ldmatrix's 8 rows hit distinct banks.
template <int Head>
constexpr int pitch = Head + 8;

struct Dims {
  std::int64_t steps, channels;
  int heads;
  float scale;
};

// Sequence and head of this block (blockIdx.y = b * heads + h), and where the head starts in qkv
// (row width 3C) and in a [B, T, C] tensor.
template <int Head>
struct HeadAt {
  std::int64_t pair, qkv, btc;
  __device__ explicit HeadAt(const Dims& d)
      : pair(blockIdx.y),
        qkv((pair / d.heads) * d.steps * 3 * d.channels + (pair % d.heads) * Head),
        btc((pair / d.heads) * d.steps * d.channels + (pair % d.heads) * Head) {}
};

// Rows [row0, row0 + Rows) of one head (Head columns, leading dimension ld) into a staged tile;
// rows at or past `steps` become zero.
template <class T, int Head, int Rows>
__device__ __forceinline__ void stage_rows(T* tile, const T* src, std::int64_t ld, std::int64_t row0,
                                           std::int64_t steps) {
  constexpr int per_chunk = 16 / static_cast<int>(sizeof(T)), chunks = Head / per_chunk;
  for (int idx = threadIdx.x; idx < Rows * chunks; idx += threads) {
    const int r = idx / chunks, c = (idx % chunks) * per_chunk;
    const std::int64_t row = row0 + r;
    const bool valid = row < steps;
    cp_async<16>(tile + r * pitch<Head> + c, valid ? src + row * ld + c : src, valid ? 16 : 0);
  }
}

// A fragment (rows m0.., k0..k0+15) of a staged [m][k] tile.
template <int Pitch, class T>
__device__ __forceinline__ void a_fragment(unsigned (&a)[4], const T* tile, int m0, int k0) {
  const int lane = threadIdx.x % 32, j = lane / 8, r = lane % 8;
  ldmatrix_x4(a, tile + (m0 + (j & 1) * 8 + r) * Pitch + k0 + (j >> 1) * 8);
}

// B fragments of columns n0..n0+7 and n0+8..n0+15 (depth k0..k0+15) of a staged [n][k] tile.
template <int Pitch, class T>
__device__ __forceinline__ void b_fragments(unsigned (&b0)[2], unsigned (&b1)[2], const T* tile, int n0, int k0) {
  const int lane = threadIdx.x % 32, j = lane / 8, r = lane % 8;
  unsigned r4[4];
  ldmatrix_x4(r4, tile + (n0 + (j >> 1) * 8 + r) * Pitch + k0 + (j & 1) * 8);
  b0[0] = r4[0], b0[1] = r4[1], b1[0] = r4[2], b1[1] = r4[3];
}

// The same from a staged [k][n] tile.
template <int Pitch, class T>
__device__ __forceinline__ void b_fragments_trans(unsigned (&b0)[2], unsigned (&b1)[2], const T* tile, int n0,
                                                  int k0) {
  const int lane = threadIdx.x % 32, j = lane / 8, r = lane % 8;
  unsigned r4[4];
  ldmatrix_x4_trans(r4, tile + (k0 + (j & 1) * 8 + r) * Pitch + n0 + (j >> 1) * 8);
  b0[0] = r4[0], b0[1] = r4[1], b1[0] = r4[2], b1[1] = r4[3];
}

template <class T>
__device__ __forceinline__ unsigned pack2(float lo, float hi) {
  unsigned bits;
  if constexpr (std::is_same_v<T, __half>) {
    const __half2 h = __floats2half2_rn(lo, hi);
    memcpy(&bits, &h, sizeof bits);
  } else {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    memcpy(&bits, &h, sizeof bits);
  }
  return bits;
}

// out[nt] = rows m0..m0+15 of `a` ([m][Head]) times columns nt*8.. of b^T (b: [N][Head]), N = 8 NT.
// Accumulator element v of out[nt] is row g + 8 (v / 2), column nt * 8 + 2 t + v % 2 (g = lane / 4,
// t = lane % 4), as mma lays it out.
template <class T, int Head, int NT>
__device__ __forceinline__ void row_products(float (&out)[NT][4], const T* a, int m0, const T* b) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) out[nt][0] = out[nt][1] = out[nt][2] = out[nt][3] = 0.0f;
#pragma unroll
  for (int k0 = 0; k0 < Head; k0 += 16) {
    unsigned af[4];
    a_fragment<pitch<Head>>(af, a, m0, k0);
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      unsigned b0[2], b1[2];
      b_fragments<pitch<Head>>(b0, b1, b, np * 16, k0);
      mma<T>(out[2 * np], af, b0);
      mma<T>(out[2 * np + 1], af, b1);
    }
  }
}

// acc (16 x Head) += p (16 x 8 NT, accumulator layout, rounded to T) times tile ([8 NT][Head]).
template <class T, int Head, int NT>
__device__ __forceinline__ void accumulate(float (&acc)[Head / 8][4], const float (&p)[NT][4], const T* tile) {
#pragma unroll
  for (int ks = 0; ks < NT / 2; ++ks) {
    const unsigned a[4] = {pack2<T>(p[2 * ks][0], p[2 * ks][1]), pack2<T>(p[2 * ks][2], p[2 * ks][3]),
                           pack2<T>(p[2 * ks + 1][0], p[2 * ks + 1][1]), pack2<T>(p[2 * ks + 1][2], p[2 * ks + 1][3])};
#pragma unroll
    for (int dp = 0; dp < Head / 16; ++dp) {
      unsigned b0[2], b1[2];
      b_fragments_trans<pitch<Head>>(b0, b1, tile, dp * 16, ks * 16);
      mma<T>(acc[2 * dp], a, b0);
      mma<T>(acc[2 * dp + 1], a, b1);
    }
  }
}

// Max or sum over the 4 lanes holding one accumulator row.
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// Writes accumulator rows (scaled) to row-major memory: row i (0: g, 1: g + 8) at rows[i], if set.
template <class T, int Head>
__device__ __forceinline__ void store_rows(const float (&acc)[Head / 8][4], T* const (&rows)[2], const float (&scale)[2]) {
  const int t = threadIdx.x % 4;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if (rows[i] == nullptr) continue;
#pragma unroll
    for (int dt = 0; dt < Head / 8; ++dt) {
      *reinterpret_cast<unsigned*>(rows[i] + dt * 8 + 2 * t) =
          pack2<T>(acc[dt][2 * i] * scale[i], acc[dt][2 * i + 1] * scale[i]);
    }
  }
}

template <class T, int Head>
__global__ void __launch_bounds__(threads) forward_kernel(const T* qkv, T* out, float* lse, Dims d) {
  extern __shared__ __align__(16) unsigned char shared[];
  T* const q_tile = reinterpret_cast<T*>(shared);
  T* const k_tile = q_tile + block_rows * pitch<Head>;
  T* const v_tile = k_tile + key_tile * pitch<Head>;
  const HeadAt<Head> head(d);
  const std::int64_t width = 3 * d.channels, q0 = static_cast<std::int64_t>(blockIdx.x) * block_rows;
  const T* const q_src = qkv + head.qkv;
  stage_rows<T, Head, block_rows>(q_tile, q_src, width, q0, d.steps);
  cp_async_commit();
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4, m0 = (threadIdx.x / 32) * 16;
  const float scale2 = d.scale * log2e;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
  float o[Head / 8][4] = {};
  const std::int64_t last_key = min(d.steps, q0 + block_rows) - 1;
  for (std::int64_t k0 = 0; k0 <= last_key; k0 += key_tile) {
    __syncthreads();  // every warp is done with the previous key and value tiles
    stage_rows<T, Head, key_tile>(k_tile, q_src + d.channels, width, k0, d.steps);
    stage_rows<T, Head, key_tile>(v_tile, q_src + 2 * d.channels, width, k0, d.steps);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    float s[key_tile / 8][4];
    row_products<T, Head, key_tile / 8>(s, q_tile, m0, k_tile);
    // Scores in base-2 units; masked ones -inf. Every row sees key k0 (k0 <= q0), so maxima are finite.
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < key_tile / 8; ++nt) {
#pragma unroll
      for (int v = 0; v < 4; ++v) {
        const std::int64_t query = q0 + m0 + g + (v / 2) * 8, key = k0 + nt * 8 + 2 * t + v % 2;
        s[nt][v] = key <= query && key < d.steps ? s[nt][v] * scale2 : -INFINITY;
        tile_max[v / 2] = fmaxf(tile_max[v / 2], s[nt][v]);
      }
    }
    float correction[2], tile_sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const float new_max = fmaxf(row_max[i], quad_max(tile_max[i]));
      correction[i] = exp2f(row_max[i] - new_max);
      row_max[i] = new_max;
    }
#pragma unroll
    for (int nt = 0; nt < key_tile / 8; ++nt) {
#pragma unroll
      for (int v = 0; v < 4; ++v) {
        s[nt][v] = exp2f(s[nt][v] - row_max[v / 2]);
        tile_sum[v / 2] += s[nt][v];
      }
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) row_sum[i] = row_sum[i] * correction[i] + quad_sum(tile_sum[i]);
#pragma unroll
    for (int dt = 0; dt < Head / 8; ++dt) {
#pragma unroll
      for (int v = 0; v < 4; ++v) o[dt][v] *= correction[v / 2];
    }
    accumulate<T, Head, key_tile / 8>(o, s, v_tile);
  }
  T* rows[2] = {nullptr, nullptr};
  float inverse[2] = {0.0f, 0.0f};
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const std::int64_t query = q0 + m0 + g + i * 8;
    if (query >= d.steps) continue;
    rows[i] = out + head.btc + query * d.channels;
    inverse[i] = 1.0f / row_sum[i];
    if (t == 0) lse[head.pair * d.steps + query] = row_max[i] / log2e + logf(row_sum[i]);
  }
  store_rows<T, Head>(o, rows, inverse);
}

// One block per key tile: dK and dV over the query tiles at or after it.
template <class T, int Head>
__global__ void __launch_bounds__(threads)
    dkv_kernel(const T* qkv, const T* dout, const float* lse, const float* delta, T* dqkv, Dims d) {
  extern __shared__ __align__(16) unsigned char shared[];
  T* const k_tile = reinterpret_cast<T*>(shared);
  T* const v_tile = k_tile + block_rows * pitch<Head>;
  T* const q_tile = v_tile + block_rows * pitch<Head>;
  T* const dy_tile = q_tile + query_tile * pitch<Head>;
  float* const tile_lse = reinterpret_cast<float*>(dy_tile + query_tile * pitch<Head>);
  float* const tile_delta = tile_lse + query_tile;
  const HeadAt<Head> head(d);
  const std::int64_t width = 3 * d.channels, k0 = static_cast<std::int64_t>(blockIdx.x) * block_rows;
  const T* const q_src = qkv + head.qkv;
  stage_rows<T, Head, block_rows>(k_tile, q_src + d.channels, width, k0, d.steps);
  stage_rows<T, Head, block_rows>(v_tile, q_src + 2 * d.channels, width, k0, d.steps);
  cp_async_commit();
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4, m0 = (threadIdx.x / 32) * 16;
  const float scale2 = d.scale * log2e;
  float dk[Head / 8][4] = {}, dv[Head / 8][4] = {};
  for (std::int64_t q0 = k0; q0 < d.steps; q0 += query_tile) {
    __syncthreads();  // every warp is done with the previous query tiles
    stage_rows<T, Head, query_tile>(q_tile, q_src, width, q0, d.steps);
    stage_rows<T, Head, query_tile>(dy_tile, dout + head.btc, d.channels, q0, d.steps);
    cp_async_commit();
    if (threadIdx.x < query_tile) {
      const std::int64_t query = q0 + threadIdx.x;
      tile_lse[threadIdx.x] = query < d.steps ? lse[head.pair * d.steps + query] * log2e : 0.0f;
      tile_delta[threadIdx.x] = query < d.steps ? delta[head.pair * d.steps + query] : 0.0f;
    }
    cp_async_wait<0>();
    __syncthreads();
    float p[query_tile / 8][4], ds[query_tile / 8][4];
    row_products<T, Head, query_tile / 8>(p, k_tile, m0, q_tile);    // S^T = K Q^T
    row_products<T, Head, query_tile / 8>(ds, v_tile, m0, dy_tile);  // dP^T = V dO^T
#pragma unroll
    for (int nt = 0; nt < query_tile / 8; ++nt) {
#pragma unroll
      for (int v = 0; v < 4; ++v) {
        const int qi = nt * 8 + 2 * t + v % 2;
        const std::int64_t key = k0 + m0 + g + (v / 2) * 8, query = q0 + qi;
        const bool visible = key <= query && query < d.steps;
        p[nt][v] = visible ? exp2f(p[nt][v] * scale2 - tile_lse[qi]) : 0.0f;
        ds[nt][v] = p[nt][v] * (ds[nt][v] - tile_delta[qi]);
      }
    }
    accumulate<T, Head, query_tile / 8>(dv, p, dy_tile);  // dV += P^T dO
    accumulate<T, Head, query_tile / 8>(dk, ds, q_tile);  // dK += dS^T Q (scaled below)
  }
  T* dk_rows[2] = {nullptr, nullptr};
  T* dv_rows[2] = {nullptr, nullptr};
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const std::int64_t key = k0 + m0 + g + i * 8;
    if (key >= d.steps) continue;
    dk_rows[i] = dqkv + head.qkv + key * width + d.channels;
    dv_rows[i] = dk_rows[i] + d.channels;
  }
  const float dk_scale[2] = {d.scale, d.scale}, one[2] = {1.0f, 1.0f};
  store_rows<T, Head>(dk, dk_rows, dk_scale);
  store_rows<T, Head>(dv, dv_rows, one);
}

// One block per query tile: dQ over the key tiles at or before it.
template <class T, int Head>
__global__ void __launch_bounds__(threads)
    dq_kernel(const T* qkv, const T* dout, const float* lse, const float* delta, T* dqkv, Dims d) {
  extern __shared__ __align__(16) unsigned char shared[];
  T* const q_tile = reinterpret_cast<T*>(shared);
  T* const dy_tile = q_tile + block_rows * pitch<Head>;
  T* const k_tile = dy_tile + block_rows * pitch<Head>;
  T* const v_tile = k_tile + key_tile * pitch<Head>;
  const HeadAt<Head> head(d);
  const std::int64_t width = 3 * d.channels, q0 = static_cast<std::int64_t>(blockIdx.x) * block_rows;
  const T* const q_src = qkv + head.qkv;
  stage_rows<T, Head, block_rows>(q_tile, q_src, width, q0, d.steps);
  stage_rows<T, Head, block_rows>(dy_tile, dout + head.btc, d.channels, q0, d.steps);
  cp_async_commit();
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4, m0 = (threadIdx.x / 32) * 16;
  const float scale2 = d.scale * log2e;
  float row_lse[2], row_delta[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const std::int64_t query = q0 + m0 + g + i * 8;
    row_lse[i] = query < d.steps ? lse[head.pair * d.steps + query] * log2e : 0.0f;
    row_delta[i] = query < d.steps ? delta[head.pair * d.steps + query] : 0.0f;
  }
  float dq[Head / 8][4] = {};
  const std::int64_t last_key = min(d.steps, q0 + block_rows) - 1;
  for (std::int64_t k0 = 0; k0 <= last_key; k0 += key_tile) {
    __syncthreads();
    stage_rows<T, Head, key_tile>(k_tile, q_src + d.channels, width, k0, d.steps);
    stage_rows<T, Head, key_tile>(v_tile, q_src + 2 * d.channels, width, k0, d.steps);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    float p[key_tile / 8][4], ds[key_tile / 8][4];
    row_products<T, Head, key_tile / 8>(p, q_tile, m0, k_tile);    // S = Q K^T
    row_products<T, Head, key_tile / 8>(ds, dy_tile, m0, v_tile);  // dP = dO V^T
#pragma unroll
    for (int nt = 0; nt < key_tile / 8; ++nt) {
#pragma unroll
      for (int v = 0; v < 4; ++v) {
        const std::int64_t query = q0 + m0 + g + (v / 2) * 8, key = k0 + nt * 8 + 2 * t + v % 2;
        const bool visible = key <= query && query < d.steps;
        const float prob = visible ? exp2f(p[nt][v] * scale2 - row_lse[v / 2]) : 0.0f;
        ds[nt][v] = prob * (ds[nt][v] - row_delta[v / 2]);
      }
    }
    accumulate<T, Head, key_tile / 8>(dq, ds, k_tile);  // dQ += dS K (scaled below)
  }
  T* rows[2] = {nullptr, nullptr};
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const std::int64_t query = q0 + m0 + g + i * 8;
    if (query < d.steps) rows[i] = dqkv + head.qkv + query * width;
  }
  const float scale[2] = {d.scale, d.scale};
  store_rows<T, Head>(dq, rows, scale);
}

Dims dims_of(const Tensor& qkv, std::int64_t heads) {
  Dims d{};
  d.steps = qkv.size(1);
  d.channels = qkv.size(2) / 3;
  d.heads = static_cast<int>(heads);
  d.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d.channels / heads)));
  return d;
}

template <class Kernel>
void launch(Kernel* kernel, std::size_t shared_bytes, const Tensor& qkv, const Dims& d, cudaStream_t stream,
            const char* name, auto... args) {
  allow_dynamic_shared_memory(reinterpret_cast<const void*>(kernel), shared_bytes, qkv.device().index(), name);
  require(qkv.size(0) * d.heads <= 65535, name, ": batch x heads (", qkv.size(0), " x ", d.heads,
          ") exceeds the 65535 blocks of a grid's y dimension; split the batch");
  const dim3 grid(static_cast<unsigned>((d.steps + block_rows - 1) / block_rows),
                  static_cast<unsigned>(qkv.size(0) * d.heads));
  kernel<<<grid, threads, shared_bytes, stream>>>(args..., d);
  check_launch(name);
}

// Calls body.template operator()<T, Head>() for qkv's 16-bit type and head size.
template <class Body>
void visit(const Tensor& qkv, std::int64_t heads, Body&& body) {
  const bool half = qkv.dtype() == DType::f16;
  const std::int64_t head_size = qkv.size(2) / 3 / heads;
  if (head_size != 64 && head_size != 128) {
    fail(ErrorCategory::invalid_argument, "fused attention (tensor cores) takes head size 64 or 128, got ", head_size);
  }
  if (head_size == 64) {
    if (half) body.template operator()<__half, 64>();
    else body.template operator()<__nv_bfloat16, 64>();
  } else {
    if (half) body.template operator()<__half, 128>();
    else body.template operator()<__nv_bfloat16, 128>();
  }
}

template <int Head>
constexpr std::size_t tile_bytes(int rows) {
  return static_cast<std::size_t>(rows) * pitch<Head> * 2;
}

}  // namespace

bool attention_mma_applies(const Tensor& qkv, std::int64_t heads, std::initializer_list<const Tensor*> tensors) {
  if (qkv.dtype() != DType::f16 && qkv.dtype() != DType::bf16) return false;
  const std::int64_t head_size = qkv.size(2) / 3 / heads;
  if (head_size != 64 && head_size != 128) return false;
  if (qkv.size(0) * heads > 65535) return false;
  for (const Tensor* t : tensors) {
    if (reinterpret_cast<std::uintptr_t>(t->raw_data()) % 16 != 0) return false;
  }
  return true;
}

void attention_mma_forward(const Tensor& qkv, const Tensor& out, const Tensor& lse, std::int64_t heads,
                           void* stream) {
  const DeviceGuard guard(qkv.device());
  const Dims d = dims_of(qkv, heads);
  visit(qkv, heads, [&]<class T, int Head>() {
    launch(forward_kernel<T, Head>, tile_bytes<Head>(block_rows + 2 * key_tile), qkv, d, as_stream(stream),
           "fused attention forward (tensor cores)", device_data<T>(qkv), device_data<T>(out),
           device_data<float>(lse));
  });
}

void attention_mma_backward(const Tensor& dout, const Tensor& qkv, const Tensor& lse, const float* delta,
                            const Tensor& dqkv, std::int64_t heads, void* stream) {
  const DeviceGuard guard(qkv.device());
  const Dims d = dims_of(qkv, heads);
  const cudaStream_t s = as_stream(stream);
  visit(qkv, heads, [&]<class T, int Head>() {
    launch(dkv_kernel<T, Head>, tile_bytes<Head>(2 * block_rows + 2 * query_tile) + 2 * query_tile * sizeof(float),
           qkv, d, s, "fused attention dK/dV (tensor cores)", device_data<T>(qkv), device_data<T>(dout),
           device_data<float>(lse), delta, device_data<T>(dqkv));
    launch(dq_kernel<T, Head>, tile_bytes<Head>(2 * block_rows + 2 * key_tile), qkv, d, s,
           "fused attention dQ (tensor cores)", device_data<T>(qkv), device_data<T>(dout), device_data<float>(lse),
           delta, device_data<T>(dqkv));
  });
}

}  // namespace loom::kernels::cuda
