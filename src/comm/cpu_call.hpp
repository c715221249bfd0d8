// What the CPU backends between processes (MPI, Gloo) share in queuing a call: a tensor's memory as
// the call sees it, the tensors held alive by the call, and the f16/bf16 and avg handling
// (16-bit tensors are reduced in fp32; avg is a sum divided by the number of ranks).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <tuple>

#include "loom/core/tensor.hpp"

namespace loom::comm::detail {

inline bool is_16bit(DType dtype) { return dtype == DType::f16 || dtype == DType::bf16; }

inline void divide(float* values, std::int64_t n, int size) {
  const auto divisor = static_cast<float>(size);
  for (std::int64_t i = 0; i < n; ++i) values[i] /= divisor;
}

// A tensor's memory as a call uses it; the call's `held` tuple keeps the tensor alive.
struct View {
  void* data;
  std::int64_t numel;
  DType dtype;
  std::size_t nbytes;
};
inline View view_of(const Tensor& t) {
  if (!t.defined()) return {nullptr, 0, DType::f32, 0};  // a reduce's output off the root
  return {t.raw_data(), t.numel(), t.dtype(), t.nbytes()};
}

template <class... T>
std::shared_ptr<void> hold(const T&... tensors) {
  return std::make_shared<std::tuple<T...>>(tensors...);
}

}  // namespace loom::comm::detail
