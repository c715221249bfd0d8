// Typed access to the floating dtypes for CPU kernels: f32, f16 and bf16 load and store through
// fp32, and visit_float_dtype runs a templated body for the tensor's element type.
#pragma once

#include <algorithm>
#include <type_traits>
#include <cstdint>

#include "loom/core/dtype.hpp"
#include "loom/core/error.hpp"
#include "loom/core/numeric.hpp"

namespace loom::kernels::cpu {

inline float to_f32(float v) { return v; }
inline float to_f32(half v) { return to_float(v); }
inline float to_f32(bfloat16 v) { return to_float(v); }

template <class T> T from_f32(float v);
template <> inline float from_f32<float>(float v) { return v; }
template <> inline half from_f32<half>(float v) { return to_half(v); }
template <> inline bfloat16 from_f32<bfloat16>(float v) { return to_bfloat16(v); }

// Calls body.template operator()<T>() with T the storage type of dtype (f32, f16 or bf16).
template <class Body>
void visit_float_dtype(DType dtype, Body&& body) {
  switch (dtype) {
    case DType::f32: body.template operator()<float>(); return;
    case DType::f16: body.template operator()<half>(); return;
    case DType::bf16: body.template operator()<bfloat16>(); return;
    default: fail(ErrorCategory::invalid_argument, "expected a floating dtype (f32, f16, bf16), got ", dtype);
  }
}

template <class T>
void to_f32(const T* src, float* dst, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) dst[i] = to_f32(src[i]);
}
template <class T>
void from_f32(const float* src, T* dst, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) dst[i] = from_f32<T>(src[i]);
}

// Runs fn(const float* a, const float* b, float* out, count) over chunks of up to two elementwise
// inputs and their output, in parallel: f32 data directly, f16/bf16 through fp32 copies (b is null
// when in_b is). out may alias an input; the chunks are fixed, so the thread count changes nothing.
template <class T, class Fn>
void map_chunks(const T* in_a, const T* in_b, T* out, std::int64_t n, Fn&& fn) {
  constexpr std::int64_t chunk = 2048;
  const std::int64_t chunks = (n + chunk - 1) / chunk;
#pragma omp parallel for if (n > (1 << 15))
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::int64_t begin = c * chunk, count = std::min(chunk, n - begin);
    if constexpr (std::is_same_v<T, float>) {
      fn(in_a + begin, in_b ? in_b + begin : nullptr, out + begin, count);
    } else {
      float a[chunk], b[chunk], result[chunk];
      to_f32(in_a + begin, a, count);
      if (in_b) to_f32(in_b + begin, b, count);
      fn(a, in_b ? b : nullptr, result, count);
      from_f32(result, out + begin, count);
    }
  }
}

}  // namespace loom::kernels::cpu
