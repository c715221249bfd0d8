// Row access for the one-block-per-row kernels (LayerNorm, softmax, cross-entropy). A row is cut
// into chunks of 8 consecutive elements; chunk k belongs to thread k % blockDim.x, which visits its
// elements in order. Where the rows' tensors start 16-byte aligned and rows keep that alignment
// (`vector`), whole chunks move as 16-byte loads and stores (two for f32), otherwise element by
// element: ownership and order are the same either way, and so are the results.
#pragma once

#include <initializer_list>

#include "common.cuh"

namespace loom::kernels::cuda {

constexpr int row_chunk = 8;

template <class T>
struct alignas(16) RowChunk {
  T v[row_chunk];
};

// Elements [8k, 8k + valid) of row into out[0, valid) as fp32; the rest of out is zero.
template <class T>
__device__ __forceinline__ void load_chunk(const T* row, std::int64_t k, int valid, bool vector,
                                           float (&out)[row_chunk]) {
  const T* p = row + k * row_chunk;
  if (vector && valid == row_chunk) {
    const RowChunk<T> c = *reinterpret_cast<const RowChunk<T>*>(p);
#pragma unroll
    for (int e = 0; e < row_chunk; ++e) out[e] = to_f32(c.v[e]);
  } else {
#pragma unroll
    for (int e = 0; e < row_chunk; ++e) out[e] = e < valid ? to_f32(p[e]) : 0.0f;
  }
}

// in[0, valid) into elements [8k, 8k + valid) of row.
template <class T>
__device__ __forceinline__ void store_chunk(T* row, std::int64_t k, int valid, bool vector,
                                            const float (&in)[row_chunk]) {
  T* p = row + k * row_chunk;
  if (vector && valid == row_chunk) {
    RowChunk<T> c;
#pragma unroll
    for (int e = 0; e < row_chunk; ++e) c.v[e] = from_f32<T>(in[e]);
    *reinterpret_cast<RowChunk<T>*>(p) = c;
  } else {
#pragma unroll
    for (int e = 0; e < row_chunk; ++e) {
      if (e < valid) p[e] = from_f32<T>(in[e]);
    }
  }
}

// body(k, valid) for each chunk of the first n elements of a row that this thread owns, in order.
template <class Body>
__device__ __forceinline__ void for_own_chunks(std::int64_t n, Body&& body) {
  const std::int64_t chunks = (n + row_chunk - 1) / row_chunk;
  for (std::int64_t k = threadIdx.x; k < chunks; k += blockDim.x) {
    body(k, static_cast<int>(min(static_cast<std::int64_t>(row_chunk), n - k * row_chunk)));
  }
}

// Threads for one block per row of n elements: one per chunk, in whole warps, at most 256. It
// depends on n alone (never on alignment), and so does the chunks' ownership.
inline int row_threads(std::int64_t n) {
  const std::int64_t chunks = (n + row_chunk - 1) / row_chunk;
  return static_cast<int>(std::clamp<std::int64_t>((chunks + 31) / 32 * 32, 32, 256));
}

// Whether rows `row_stride` elements apart, starting at each pointer, are all 16-byte aligned.
inline bool rows_vector_aligned(std::int64_t row_stride, std::initializer_list<const void*> pointers) {
  if (row_stride % row_chunk != 0) return false;
  for (const void* p : pointers) {
    if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0) return false;
  }
  return true;
}

}  // namespace loom::kernels::cuda
