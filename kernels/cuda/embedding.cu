// Token + position embedding. The backward pass is deterministic without atomics: dwpe by one
// thread per (position, channel) summing over the batch in order; dwte by sorting the positions by
// token (a stable radix sort keeps each token's positions in order), then one block per distinct
// token adds its positions' gradients in that order: the same additions, in the same order, as
// the CPU kernel, so the same bits, with the work spread over tokens and channels.
#include <cub/device/device_radix_sort.cuh>

#include "common.cuh"
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

template <class T, class G>
__global__ void position_grad_kernel(const T* dout, G* dwpe, std::int64_t batch, std::int64_t steps,
                                     std::int64_t channels) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < steps * channels;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    float sum = 0.0f;
    for (std::int64_t b = 0; b < batch; ++b) sum += to_f32(dout[b * steps * channels + i]);
    dwpe[i] = from_f32<G>(to_f32(dwpe[i]) + sum);
  }
}

// keys[i] = the token at position i, or vocab for one outside [0, vocab); values[i] = i.
__global__ void sort_keys_kernel(const std::int32_t* tokens, std::int64_t n, std::int64_t vocab, std::uint32_t* keys,
                                 std::uint32_t* positions) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int32_t token = tokens[i];
    keys[i] = static_cast<std::uint32_t>(token >= 0 && token < vocab ? token : vocab);
    positions[i] = static_cast<std::uint32_t>(i);
  }
}

// Block i handles the run of equal keys that starts at sorted index i (other blocks return at
// once). Tokens were range-checked by the forward pass; one outside [0, vocab) (key vocab) is
// skipped here rather than written out of bounds.
template <class T, class G>
__global__ void token_grad_kernel(const std::uint32_t* sorted_keys, const std::uint32_t* sorted_positions,
                                  const T* dout, G* dwte, std::int64_t positions, std::int64_t vocab,
                                  std::int64_t channels) {
  const std::int64_t start = blockIdx.x;
  const std::uint32_t token = sorted_keys[start];
  if ((start > 0 && sorted_keys[start - 1] == token) || token >= vocab) return;
  std::int64_t end = start + 1;
  while (end < positions && sorted_keys[end] == token) ++end;
  G* row = dwte + static_cast<std::int64_t>(token) * channels;
  for (std::int64_t c = threadIdx.x; c < channels; c += blockDim.x) {
    G value = row[c];
    for (std::int64_t i = start; i < end; ++i) {
      value = from_f32<G>(to_f32(value) + to_f32(dout[static_cast<std::int64_t>(sorted_positions[i]) * channels + c]));
    }
    row[c] = value;
  }
}

// The key bits the sort must look at: keys lie in [0, vocab].
int key_bits(std::int64_t vocab) {
  int bits = 1;
  while (bits < 32 && (std::int64_t{1} << bits) <= vocab) ++bits;
  return bits;
}

// Positions sorted by token, stable: four arrays of n in one stream-ordered scratch block, plus
// the radix sort's own temporary storage.
class TokenSort {
 public:
  TokenSort(const Tensor& tokens, std::int64_t vocab, cudaStream_t stream)
      : n_(tokens.numel()), scratch_(4 * static_cast<std::size_t>(n_) * sizeof(std::uint32_t), stream) {
    require(n_ < (std::int64_t{1} << 31), "embedding_backward: ", n_, " positions exceed the sort's 2^31 limit");
    std::uint32_t* base = scratch_.as<std::uint32_t>();
    sort_keys_kernel<<<grid_for(n_, threads), threads, 0, stream>>>(device_data<std::int32_t>(tokens), n_, vocab, base,
                                                                    base + n_);
    check_launch("embedding_backward: sort keys");
    const int bits = key_bits(vocab);
    std::size_t temp_bytes = 0;
    check(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, base, base + 2 * n_, base + n_, base + 3 * n_,
                                          static_cast<int>(n_), 0, bits, stream),
          "embedding_backward: sizing the token sort");
    const StreamScratch temp(std::max<std::size_t>(temp_bytes, 1), stream);
    check(cub::DeviceRadixSort::SortPairs(temp.as<void>(), temp_bytes, base, base + 2 * n_, base + n_, base + 3 * n_,
                                          static_cast<int>(n_), 0, bits, stream),
          "embedding_backward: sorting positions by token");
  }
  const std::uint32_t* keys() const { return scratch_.as<std::uint32_t>() + 2 * n_; }
  const std::uint32_t* positions() const { return scratch_.as<std::uint32_t>() + 3 * n_; }

 private:
  std::int64_t n_;
  StreamScratch scratch_;
};

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
  const TokenSort sorted(tokens, dwte.size(0), s);
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
