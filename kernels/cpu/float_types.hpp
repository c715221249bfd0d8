// Typed access to the floating dtypes for CPU kernels: f32, f16 and bf16 load and store through
// fp32, and visit_float_dtype runs a templated body for the tensor's element type.
#pragma once

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

}  // namespace loom::kernels::cpu
