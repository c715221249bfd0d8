// The deterministic gradients of embedding backward passes (embedding.cu, vocab_parallel.cu),
// never with atomics: the position embedding's by one thread per (position, channel) summing over
// the batch in order; the token embedding's by sorting the positions by token, then one block per
// distinct token adding its positions' gradients in position order.
#pragma once

#include <cub/device/device_radix_sort.cuh>

#include "common.cuh"

namespace loom::kernels::cuda {

namespace token_sort {
constexpr int threads = 256;
}  // namespace token_sort

// keys[i] = the row of the token at position i (token - first), or `rows` for one outside
// [first, first + rows); values[i] = i.
static __global__ void sort_keys_kernel(const std::int32_t* tokens, std::int64_t n, std::int64_t first, std::int64_t rows,
                                 std::uint32_t* keys, std::uint32_t* positions) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t row = static_cast<std::int64_t>(tokens[i]) - first;
    keys[i] = static_cast<std::uint32_t>(row >= 0 && row < rows ? row : rows);
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

// dwpe[t, c] += the sum over b of dout[b, t, c], summed in fp32 in batch order.
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

// The key bits the sort must look at: keys lie in [0, vocab].
inline int key_bits(std::int64_t vocab) {
  int bits = 1;
  while (bits < 32 && (std::int64_t{1} << bits) <= vocab) ++bits;
  return bits;
}

// Positions sorted by the row of their token in a table of ids [first, first + vocab), stable
// (tokens outside it sort last, as key vocab): four arrays of n in one stream-ordered scratch
// block, plus the radix sort's own temporary storage.
class TokenSort {
 public:
  TokenSort(const Tensor& tokens, std::int64_t first, std::int64_t vocab, cudaStream_t stream)
      : n_(tokens.numel()), scratch_(4 * static_cast<std::size_t>(n_) * sizeof(std::uint32_t), stream) {
    require(n_ < (std::int64_t{1} << 31), "embedding_backward: ", n_, " positions exceed the sort's 2^31 limit");
    std::uint32_t* base = scratch_.as<std::uint32_t>();
    sort_keys_kernel<<<grid_for(n_, token_sort::threads), token_sort::threads, 0, stream>>>(device_data<std::int32_t>(tokens), n_, first, vocab,
                                                                    base, base + n_);
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

}  // namespace loom::kernels::cuda
