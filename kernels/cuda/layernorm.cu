// LayerNorm: one block per row for the forward pass and dx; the parameter gradients in two
// deterministic stages (per-chunk partial sums, then an in-order sum of the chunks).
#include "common.cuh"
#include "training.hpp"

namespace loom::kernels::cuda {

namespace {

constexpr int threads = 256;
constexpr std::int64_t max_chunks = 65535;  // gridDim.y limit

// The rest of a row's LayerNorm once each thread has summed its columns of xr (`sum`): the mean,
// the variance from xr again, the output and the statistics. Both forward kernels end here, so
// they reduce in the same order and give the same bits.
template <class T>
__device__ void finish_layernorm_row(const T* xr, float sum, const T* weight, const T* bias, T* out_row, float* mean,
                                     float* rstd, std::int64_t channels, float eps) {
  const float m = block_reduce(sum) / static_cast<float>(channels);
  float squares = 0.0f;
  for (std::int64_t c = threadIdx.x; c < channels; c += blockDim.x) {
    const float d = to_f32(xr[c]) - m;
    squares += d * d;
  }
  const float s = rsqrtf(block_reduce(squares) / static_cast<float>(channels) + eps);
  for (std::int64_t c = threadIdx.x; c < channels; c += blockDim.x) {
    out_row[c] = from_f32<T>((to_f32(xr[c]) - m) * s * to_f32(weight[c]) + to_f32(bias[c]));
  }
  if (threadIdx.x == 0) {
    *mean = m;
    *rstd = s;
  }
}

template <class T>
__global__ void layernorm_forward_kernel(const T* x, const T* weight, const T* bias, T* out, float* mean, float* rstd,
                                         std::int64_t channels, float eps) {
  const std::int64_t row = blockIdx.x;
  const T* xr = x + row * channels;
  float sum = 0.0f;
  for (std::int64_t c = threadIdx.x; c < channels; c += blockDim.x) sum += to_f32(xr[c]);
  finish_layernorm_row(xr, sum, weight, bias, out + row * channels, mean + row, rstd + row, channels, eps);
}

// layernorm_forward_kernel over sum = a + b, which it also writes: each thread rounds its columns'
// sums to T and reduces those, in the same order as the unfused kernel, so the bits are the same.
template <class T>
__global__ void residual_layernorm_forward_kernel(const T* a, const T* b, T* sum_out, const T* weight, const T* bias,
                                                  T* out, float* mean, float* rstd, std::int64_t channels, float eps) {
  const std::int64_t row = blockIdx.x;
  const T* ar = a + row * channels;
  const T* br = b + row * channels;
  T* sr = sum_out + row * channels;
  float sum = 0.0f;
  for (std::int64_t c = threadIdx.x; c < channels; c += blockDim.x) {
    const T x = from_f32<T>(to_f32(ar[c]) + to_f32(br[c]));
    sr[c] = x;
    sum += to_f32(x);
  }
  // Each thread rereads only its own writes.
  finish_layernorm_row(sr, sum, weight, bias, out + row * channels, mean + row, rstd + row, channels, eps);
}

template <class T>
__global__ void layernorm_dx_kernel(const T* dout, const T* x, const T* weight, const float* mean, const float* rstd,
                                    T* dx, std::int64_t channels) {
  const std::int64_t row = blockIdx.x;
  const T* xr = x + row * channels;
  const T* gr = dout + row * channels;
  float dnorm_sum = 0.0f, dnorm_norm_sum = 0.0f;
  for (std::int64_t c = threadIdx.x; c < channels; c += blockDim.x) {
    const float norm = (to_f32(xr[c]) - mean[row]) * rstd[row];
    const float dnorm = to_f32(gr[c]) * to_f32(weight[c]);
    dnorm_sum += dnorm;
    dnorm_norm_sum += dnorm * norm;
  }
  const float dnorm_mean = block_reduce(dnorm_sum) / static_cast<float>(channels);
  const float dnorm_norm_mean = block_reduce(dnorm_norm_sum) / static_cast<float>(channels);
  for (std::int64_t c = threadIdx.x; c < channels; c += blockDim.x) {
    const float norm = (to_f32(xr[c]) - mean[row]) * rstd[row];
    const float dnorm = to_f32(gr[c]) * to_f32(weight[c]);
    dx[row * channels + c] = from_f32<T>((dnorm - dnorm_mean - norm * dnorm_norm_mean) * rstd[row]);
  }
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
    layernorm_forward_kernel<T><<<static_cast<unsigned>(rows), threads, 0, as_stream(stream)>>>(
        device_data<T>(x), device_data<T>(weight), device_data<T>(bias), device_data<T>(out), device_data<float>(mean),
        device_data<float>(rstd), channels, eps);
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
    residual_layernorm_forward_kernel<T><<<static_cast<unsigned>(rows), threads, 0, as_stream(stream)>>>(
        device_data<T>(a), device_data<T>(b), device_data<T>(sum), device_data<T>(weight), device_data<T>(bias),
        device_data<T>(out), device_data<float>(mean), device_data<float>(rstd), channels, eps);
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
    layernorm_dx_kernel<T><<<static_cast<unsigned>(rows), threads, 0, s>>>(
        device_data<T>(dout), device_data<T>(x), device_data<T>(weight), device_data<float>(mean),
        device_data<float>(rstd), device_data<T>(dx), channels);
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
