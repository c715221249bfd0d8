// Token + position embedding. The backward pass is deterministic without atomics: dwpe by one
// thread per (position, channel) summing over the batch in order; dwte by sorting the positions by
// token (a stable radix sort keeps each token's positions in order), then one block per distinct
// token adds its positions' gradients in that order: the same additions, in the same order, as
// the CPU kernel, so the same bits, with the work spread over tokens and channels.
#include "common.cuh"
#include "embedding_grad.cuh"
#include "training.hpp"

namespace loom::kernels::cuda {

namespace {

constexpr int threads = 256;

template <class T>
__global__ void embedding_forward_kernel(const std::int32_t* tokens, const T* wte, const T* wpe, T* out,
                                         std::int64_t positions, std::int64_t steps, std::int64_t channels,
                                         std::int64_t vocab) {
  const std::int64_t n = positions * channels;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t p = i / channels, c = i % channels, token = tokens[p];
    // A token out of range (only possible when the caller said they were checked) reads as NaN.
    out[i] = token < 0 || token >= vocab
                 ? from_f32<T>(NAN)
                 : from_f32<T>(to_f32(wte[token * channels + c]) + to_f32(wpe[(p % steps) * channels + c]));
  }
}

}  // namespace

void embedding_forward(const Tensor& tokens, const Tensor& wte, const Tensor& wpe, const Tensor& out, void* stream) {
  const DeviceGuard guard(wte.device());
  const std::int64_t positions = tokens.numel(), steps = tokens.size(1), channels = wte.size(1);
  if (positions == 0) return;
  visit_float_dtype(wte.dtype(), [&]<class T>() {
    embedding_forward_kernel<T><<<grid_for(positions * channels, threads), threads, 0, as_stream(stream)>>>(
        device_data<std::int32_t>(tokens), device_data<T>(wte), device_data<T>(wpe), device_data<T>(out), positions,
        steps, channels, wte.size(0));
  });
  check_launch("embedding_forward");
}

void embedding_backward(const Tensor& tokens, const Tensor& dout, const Tensor& dwte, const Tensor& dwpe, void* stream) {
  const DeviceGuard guard(dout.device());
  const std::int64_t batch = tokens.size(0), steps = tokens.size(1), channels = dout.size(-1);
  if (batch * steps == 0) return;
  const cudaStream_t s = as_stream(stream);
  const TokenSort sorted(tokens, 0, dwte.size(0), s);
  visit_float_dtype(dout.dtype(), [&]<class T>() {
    visit_float_dtype(dwte.dtype(), [&]<class G>() {
      position_grad_kernel<T, G><<<grid_for(steps * channels, threads), threads, 0, s>>>(
          device_data<T>(dout), device_data<G>(dwpe), batch, steps, channels);
      token_grad_kernel<T, G><<<static_cast<unsigned>(batch * steps), threads, 0, s>>>(
          sorted.keys(), sorted.positions(), device_data<T>(dout), device_data<G>(dwte), batch * steps, dwte.size(0),
          channels);
    });
  });
  check_launch("embedding_backward");
}

}  // namespace loom::kernels::cuda
