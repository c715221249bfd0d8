// LayerNorm: one block per row for the forward pass and dx, rows read and written in chunks of 8
// elements (16-byte accesses where aligned, row_chunks.cuh); the parameter gradients in two
// deterministic stages (per-chunk partial sums, then an in-order sum of the chunks).
#include "common.cuh"
#include "row_chunks.cuh"
#include "training.hpp"

namespace loom::kernels::cuda {

namespace {

constexpr int threads = 256;
constexpr std::int64_t max_chunks = 65535;  // gridDim.y limit

// The rest of a row's LayerNorm once each thread has summed its elements of xr (`sum`): the mean,
// the variance from xr again, the output and the statistics. Both forward kernels end here, so
// they reduce in the same order and give the same bits.
template <class T>
__device__ void finish_layernorm_row(const T* xr, float sum, const T* weight, const T* bias, T* out_row, float* mean,
                                     float* rstd, std::int64_t channels, float eps, bool vector) {
  const float m = block_reduce(sum) / static_cast<float>(channels);
  float squares = 0.0f;
  for_own_chunks(channels, [&](std::int64_t k, int valid) {
    float x[row_chunk];
    load_chunk(xr, k, valid, vector, x);
#pragma unroll
    for (int e = 0; e < row_chunk; ++e) {
      const float d = x[e] - m;
      if (e < valid) squares += d * d;
    }
  });
  const float s = rsqrtf(block_reduce(squares) / static_cast<float>(channels) + eps);
  for_own_chunks(channels, [&](std::int64_t k, int valid) {
    float x[row_chunk], w[row_chunk], b[row_chunk];
    load_chunk(xr, k, valid, vector, x);
    load_chunk(weight, k, valid, vector, w);
    load_chunk(bias, k, valid, vector, b);
#pragma unroll
    for (int e = 0; e < row_chunk; ++e) x[e] = (x[e] - m) * s * w[e] + b[e];
    store_chunk(out_row, k, valid, vector, x);
  });
  if (threadIdx.x == 0) {
    *mean = m;
    *rstd = s;
  }
}

template <class T>
__global__ void layernorm_forward_kernel(const T* x, const T* weight, const T* bias, T* out, float* mean, float* rstd,
                                         std::int64_t channels, float eps, bool vector) {
  const std::int64_t row = blockIdx.x;
  const T* xr = x + row * channels;
  float sum = 0.0f;
  for_own_chunks(channels, [&](std::int64_t k, int valid) {
    float v[row_chunk];
    load_chunk(xr, k, valid, vector, v);
#pragma unroll
    for (int e = 0; e < row_chunk; ++e) {
      if (e < valid) sum += v[e];
    }
  });
  finish_layernorm_row(xr, sum, weight, bias, out + row * channels, mean + row, rstd + row, channels, eps, vector);
}

// layernorm_forward_kernel over sum = a + b, which it also writes: each thread rounds its elements'
// sums to T and reduces those, in the same order as the unfused kernel, so the bits are the same.
template <class T>
__global__ void residual_layernorm_forward_kernel(const T* a, const T* b, T* sum_out, const T* weight, const T* bias,
                                                  T* out, float* mean, float* rstd, std::int64_t channels, float eps,
                                                  bool vector) {
  const std::int64_t row = blockIdx.x;
  T* sr = sum_out + row * channels;
  float sum = 0.0f;
  for_own_chunks(channels, [&](std::int64_t k, int valid) {
    float av[row_chunk], bv[row_chunk];
    load_chunk(a + row * channels, k, valid, vector, av);
    load_chunk(b + row * channels, k, valid, vector, bv);
#pragma unroll
    for (int e = 0; e < row_chunk; ++e) av[e] = to_f32(from_f32<T>(av[e] + bv[e]));
    store_chunk(sr, k, valid, vector, av);
#pragma unroll
    for (int e = 0; e < row_chunk; ++e) {
      if (e < valid) sum += av[e];
    }
  });
  // Each thread rereads only its own writes.
  finish_layernorm_row(sr, sum, weight, bias, out + row * channels, mean + row, rstd + row, channels, eps, vector);
}

template <class T>
__global__ void layernorm_dx_kernel(const T* dout, const T* x, const T* weight, const float* mean, const float* rstd,
                                    T* dx, std::int64_t channels, bool vector) {
  const std::int64_t row = blockIdx.x;
  const T* xr = x + row * channels;
  const T* gr = dout + row * channels;
  const float mu = mean[row], rs = rstd[row];
  // x, dout and weight of one chunk; both passes read them the same way.
  auto load = [&](std::int64_t k, int valid, float (&xv)[row_chunk], float (&g)[row_chunk], float (&w)[row_chunk]) {
    load_chunk(xr, k, valid, vector, xv);
    load_chunk(gr, k, valid, vector, g);
    load_chunk(weight, k, valid, vector, w);
  };
  float dnorm_sum = 0.0f, dnorm_norm_sum = 0.0f;
  for_own_chunks(channels, [&](std::int64_t k, int valid) {
    float xv[row_chunk], g[row_chunk], w[row_chunk];
    load(k, valid, xv, g, w);
#pragma unroll
    for (int e = 0; e < row_chunk; ++e) {
      const float dnorm = g[e] * w[e];
      if (e < valid) {
        dnorm_sum += dnorm;
        dnorm_norm_sum += dnorm * ((xv[e] - mu) * rs);
      }
    }
  });
  const float dnorm_mean = block_reduce(dnorm_sum) / static_cast<float>(channels);
  const float dnorm_norm_mean = block_reduce(dnorm_norm_sum) / static_cast<float>(channels);
  for_own_chunks(channels, [&](std::int64_t k, int valid) {
    float xv[row_chunk], g[row_chunk], w[row_chunk];
    load(k, valid, xv, g, w);
#pragma unroll
    for (int e = 0; e < row_chunk; ++e) {
      const float norm = (xv[e] - mu) * rs;
      xv[e] = (g[e] * w[e] - dnorm_mean - norm * dnorm_norm_mean) * rs;
    }
    store_chunk(dx + row * channels, k, valid, vector, xv);
  });
}

// partial[chunk][c] = sums over the chunk's rows, in row order (grid: channel blocks x chunks).
template <class T>
__global__ void layernorm_param_partials(const T* dout, const T* x, const float* mean, const float* rstd,
                                         float* dweight_partial, float* dbias_partial, std::int64_t rows,
                                         std::int64_t channels, std::int64_t rows_per_chunk) {
  const std::int64_t c = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (c >= channels) return;
  const std::int64_t first = blockIdx.y * rows_per_chunk, last = min(rows, first + rows_per_chunk);
  float dw = 0.0f, db = 0.0f;
  for (std::int64_t r = first; r < last; ++r) {
    const float g = to_f32(dout[r * channels + c]);
    dw += (to_f32(x[r * channels + c]) - mean[r]) * rstd[r] * g;
    db += g;
  }
  dweight_partial[blockIdx.y * channels + c] = dw;
  dbias_partial[blockIdx.y * channels + c] = db;
}

template <class G>
__global__ void layernorm_param_accumulate(const float* dweight_partial, const float* dbias_partial, G* dweight,
                                           G* dbias, std::int64_t chunks, std::int64_t channels) {
  const std::int64_t c = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (c >= channels) return;
  float dw = 0.0f, db = 0.0f;
  for (std::int64_t k = 0; k < chunks; ++k) {
    dw += dweight_partial[k * channels + c];
    db += dbias_partial[k * channels + c];
  }
  dweight[c] = from_f32<G>(to_f32(dweight[c]) + dw);
  dbias[c] = from_f32<G>(to_f32(dbias[c]) + db);
}

}  // namespace

void layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out,
                       const Tensor& mean, const Tensor& rstd, float eps, void* stream) {
  const DeviceGuard guard(x.device());
  const std::int64_t channels = x.size(-1), rows = x.numel() / channels;
  if (rows == 0) return;
  visit_float_dtype(x.dtype(), [&]<class T>() {
    layernorm_forward_kernel<T><<<static_cast<unsigned>(rows), row_threads(channels), 0, as_stream(stream)>>>(
        device_data<T>(x), device_data<T>(weight), device_data<T>(bias), device_data<T>(out), device_data<float>(mean),
        device_data<float>(rstd), channels, eps,
        rows_vector_aligned(channels, {x.raw_data(), weight.raw_data(), bias.raw_data(), out.raw_data()}));
  });
  check_launch("layernorm_forward");
}

void residual_layernorm_forward(const Tensor& a, const Tensor& b, const Tensor& sum, const Tensor& weight,
                                const Tensor& bias, const Tensor& out, const Tensor& mean, const Tensor& rstd, float eps,
                                void* stream) {
  const DeviceGuard guard(a.device());
  const std::int64_t channels = a.size(-1), rows = a.numel() / channels;
  if (rows == 0) return;
  visit_float_dtype(a.dtype(), [&]<class T>() {
    residual_layernorm_forward_kernel<T><<<static_cast<unsigned>(rows), row_threads(channels), 0, as_stream(stream)>>>(
        device_data<T>(a), device_data<T>(b), device_data<T>(sum), device_data<T>(weight), device_data<T>(bias),
        device_data<T>(out), device_data<float>(mean), device_data<float>(rstd), channels, eps,
        rows_vector_aligned(channels, {a.raw_data(), b.raw_data(), sum.raw_data(), weight.raw_data(), bias.raw_data(),
                                       out.raw_data()}));
  });
  check_launch("residual_layernorm_forward");
}

void layernorm_backward(const Tensor& dout, const Tensor& x, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dx, const Tensor& dweight, const Tensor& dbias, void* stream) {
  const DeviceGuard guard(x.device());
  const std::int64_t channels = x.size(-1), rows = x.numel() / channels;
  if (rows == 0) return;
  const cudaStream_t s = as_stream(stream);
  const std::int64_t rows_per_chunk = std::max<std::int64_t>(256, (rows + max_chunks - 1) / max_chunks);
  const std::int64_t chunks = (rows + rows_per_chunk - 1) / rows_per_chunk;
  const StreamScratch partials(2 * static_cast<std::size_t>(chunks * channels) * sizeof(float), s);
  float* dw_partial = partials.as<float>();
  float* db_partial = dw_partial + chunks * channels;
  const unsigned channel_blocks = static_cast<unsigned>((channels + threads - 1) / threads);
  visit_float_dtype(x.dtype(), [&]<class T>() {
    layernorm_dx_kernel<T><<<static_cast<unsigned>(rows), row_threads(channels), 0, s>>>(
        device_data<T>(dout), device_data<T>(x), device_data<T>(weight), device_data<float>(mean),
        device_data<float>(rstd), device_data<T>(dx), channels,
        rows_vector_aligned(channels, {dout.raw_data(), x.raw_data(), weight.raw_data(), dx.raw_data()}));
    layernorm_param_partials<T><<<dim3(channel_blocks, static_cast<unsigned>(chunks)), threads, 0, s>>>(
        device_data<T>(dout), device_data<T>(x), device_data<float>(mean), device_data<float>(rstd), dw_partial,
        db_partial, rows, channels, rows_per_chunk);
  });
  visit_float_dtype(dweight.dtype(), [&]<class G>() {
    layernorm_param_accumulate<G><<<channel_blocks, threads, 0, s>>>(dw_partial, db_partial, device_data<G>(dweight),
                                                                     device_data<G>(dbias), chunks, channels);
  });
  check_launch("layernorm_backward");
}

}  // namespace loom::kernels::cuda
