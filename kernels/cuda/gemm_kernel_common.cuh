// What loom's own GEMM kernels share: operand and epilogue descriptions passed by value to the
// kernels, and the per-element epilogue (alpha, beta * C, bias, GELU with the pre-activation kept).
#pragma once

#include <optional>

#include "common.cuh"
#include "gemm.hpp"

namespace loom::kernels::cuda::gemm_detail {

struct Operand {
  const void* data;
  std::int64_t ld, batch_stride;  // batch_stride 0: one matrix for every batch
};

struct Epilogue {
  const void* c;
  std::int64_t c_ld, c_stride;
  float alpha, beta;
  const void* bias;
  bool bias_is_f32;
  bool gelu;
  void* pre_activation;  // [batch, M, N] contiguous, D's dtype; may be null
};

// Where D lives and how big the problem is.
struct Output {
  void* data;
  std::int64_t ld, batch_stride;
  std::int64_t m, n, k;
};

inline std::int64_t stride_of(const StridedMatrix& matrix) { return matrix.batch == 1 ? 0 : matrix.batch_stride; }

inline Operand operand_of(const StridedMatrix& matrix) {
  return Operand{matrix.tensor.raw_data(), matrix.ld, stride_of(matrix)};
}

inline Epilogue epilogue_of(const std::optional<StridedMatrix>& c, const GemmOptions& options) {
  const GemmEpilogue& ge = options.epilogue;
  return Epilogue{c ? c->tensor.raw_data() : nullptr,
                  c ? c->ld : 0,
                  c ? stride_of(*c) : 0,
                  options.alpha,
                  c ? options.beta : 0.0f,
                  ge.bias.defined() ? ge.bias.raw_data() : nullptr,
                  ge.bias.defined() && ge.bias.dtype() == DType::f32,
                  ge.activation == Activation::gelu,
                  ge.pre_activation.defined() ? ge.pre_activation.raw_data() : nullptr};
}

inline Output output_of(const StridedMatrix& d, const GemmShape& shape) {
  return Output{d.tensor.raw_data(), d.ld, stride_of(d), shape.m, shape.n, shape.k};
}

__device__ __forceinline__ float gelu(float x) {
  const float z = 0.7978845608028654f * (x + 0.044715f * x * x * x);
  return x / (1.0f + __expf(-2.0f * z));
}

// Writes D[batch, gi, gj] from the fp32 accumulator value; the caller checks the bounds. In is the
// input storage type (a 16-bit bias has it), Out is D's.
template <class In, class Out>
__device__ __forceinline__ void store_result(const Output& out, const Epilogue& e, std::int64_t batch,
                                             std::int64_t gi, std::int64_t gj, float acc) {
  float v = e.alpha * acc;
  if (e.c != nullptr) v += e.beta * to_f32(static_cast<const Out*>(e.c)[batch * e.c_stride + gi * e.c_ld + gj]);
  if (e.bias != nullptr) {
    v += e.bias_is_f32 ? static_cast<const float*>(e.bias)[gj] : to_f32(static_cast<const In*>(e.bias)[gj]);
  }
  if (e.gelu) {
    if (e.pre_activation != nullptr) {
      static_cast<Out*>(e.pre_activation)[(batch * out.m + gi) * out.n + gj] = from_f32<Out>(v);
    }
    v = gelu(v);
  }
  static_cast<Out*>(out.data)[batch * out.batch_stride + gi * out.ld + gj] = from_f32<Out>(v);
}

// Eight consecutive elements of storage type T, 16-byte aligned (f32: 32 bytes in two 16-byte
// accesses): one vector load or store of a row segment.
template <class T>
struct alignas(16) Eight {
  T v[8];
};

template <class T>
__device__ __forceinline__ bool aligned_16(const T* p) {
  return reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
}

// store_result for D[batch, gi, gj + c], c < count <= 8, from acc[c]: the same arithmetic per
// element, with 16-byte loads and stores of D, C and the pre-activation where all eight elements
// are in range and their addresses 16-byte aligned (the caller keeps gj a multiple of 8).
template <class In, class Out>
__device__ __forceinline__ void store_results(const Output& out, const Epilogue& e, std::int64_t batch,
                                              std::int64_t gi, std::int64_t gj, const float (&acc)[8], int count) {
  Out* d = static_cast<Out*>(out.data) + batch * out.batch_stride + gi * out.ld + gj;
  const Out* c = e.c != nullptr ? static_cast<const Out*>(e.c) + batch * e.c_stride + gi * e.c_ld + gj : nullptr;
  Out* pre = e.gelu && e.pre_activation != nullptr
                 ? static_cast<Out*>(e.pre_activation) + (batch * out.m + gi) * out.n + gj
                 : nullptr;
  const bool vector = count == 8 && aligned_16(d) && (c == nullptr || aligned_16(c)) &&
                      (pre == nullptr || aligned_16(pre));
  if (!vector) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {  // a constant bound keeps acc in registers
      if (i < count) store_result<In, Out>(out, e, batch, gi, gj + i, acc[i]);
    }
    return;
  }
  Eight<Out> c_values{}, pre_values{}, d_values{};
  if (c != nullptr) c_values = *reinterpret_cast<const Eight<Out>*>(c);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    float v = e.alpha * acc[i];
    if (c != nullptr) v += e.beta * to_f32(c_values.v[i]);
    if (e.bias != nullptr) {
      v += e.bias_is_f32 ? static_cast<const float*>(e.bias)[gj + i] : to_f32(static_cast<const In*>(e.bias)[gj + i]);
    }
    if (e.gelu) {
      pre_values.v[i] = from_f32<Out>(v);
      v = gelu(v);
    }
    d_values.v[i] = from_f32<Out>(v);
  }
  if (pre != nullptr) *reinterpret_cast<Eight<Out>*>(pre) = pre_values;
  *reinterpret_cast<Eight<Out>*>(d) = d_values;
}

}  // namespace loom::kernels::cuda::gemm_detail
