// Typed access to the floating dtypes for CPU kernels: f32, f16 and bf16 load and store through
// fp32, and visit_float_dtype runs a templated body for the tensor's element type.
#pragma once

#include <Eigen/Core>

#include <algorithm>
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

// Runs fn on fp32 chunks of the elementwise inputs and stores its result into out, in parallel.
// fn(const Eigen::ArrayXf& a, const Eigen::ArrayXf& b, Eigen::ArrayXf& result) sees up to two
// inputs converted to fp32 (b is empty when in_b is null), so Eigen's vectorized math (exp,
// tanh) applies whatever the storage dtype. out may alias an input.
template <class T, class Fn>
void transform_chunks(const T* in_a, const T* in_b, T* out, std::int64_t n, Fn&& fn) {
  constexpr std::int64_t chunk = 2048;
  const std::int64_t chunks = (n + chunk - 1) / chunk;
#pragma omp parallel for if (n > (1 << 15))
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::int64_t begin = c * chunk, count = std::min(chunk, n - begin);
    Eigen::ArrayXf a(count), b(in_b ? count : 0), result(count);
    for (std::int64_t i = 0; i < count; ++i) a[i] = to_f32(in_a[begin + i]);
    if (in_b) {
      for (std::int64_t i = 0; i < count; ++i) b[i] = to_f32(in_b[begin + i]);
    }
    fn(a, b, result);
    for (std::int64_t i = 0; i < count; ++i) out[begin + i] = from_f32<T>(result[i]);
  }
}

}  // namespace loom::kernels::cpu
