#include "src/comm/reduce.hpp"

#include <algorithm>

#include "loom/core/error.hpp"
#include "loom/core/numeric.hpp"

namespace loom::comm {

std::string_view to_string(ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
  }
  return "?";
}

namespace detail {

namespace {

template <class T>
auto widen(T v) {
  if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16>) return to_float(v);
  else if constexpr (std::is_same_v<T, float>) return v;
  else return static_cast<std::int64_t>(v);
}

template <class T, class A>
T narrow(A v) {
  if constexpr (std::is_same_v<T, half>) return to_half(v);
  else if constexpr (std::is_same_v<T, bfloat16>) return to_bfloat16(v);
  else return static_cast<T>(v);
}

template <class T>
void reduce_typed(T* out, const std::vector<const void*>& inputs, std::int64_t offset, std::int64_t count,
                  ReduceOp op) {
  const auto ranks = static_cast<std::int64_t>(inputs.size());
  for (std::int64_t i = 0; i < count; ++i) {
    auto acc = widen(static_cast<const T*>(inputs[0])[offset + i]);
    for (std::int64_t r = 1; r < ranks; ++r) {
      const auto v = widen(static_cast<const T*>(inputs[static_cast<std::size_t>(r)])[offset + i]);
      if (op == ReduceOp::max) acc = std::max(acc, v);
      else if (op == ReduceOp::min) acc = std::min(acc, v);
      else acc += v;
    }
    if (op == ReduceOp::avg) acc /= static_cast<decltype(acc)>(ranks);
    out[i] = narrow<T>(acc);
  }
}

}  // namespace

void widen_to_f32(const void* in, DType dtype, std::int64_t n, float* out) {
  const auto count = static_cast<std::size_t>(n);
  if (dtype == DType::f16) {
    const auto* values = static_cast<const half*>(in);
    for (std::size_t i = 0; i < count; ++i) out[i] = to_float(values[i]);
  } else {
    require(dtype == DType::bf16, "widen_to_f32: ", dtype, " is not f16 or bf16");
    const auto* values = static_cast<const bfloat16*>(in);
    for (std::size_t i = 0; i < count; ++i) out[i] = to_float(values[i]);
  }
}

void narrow_from_f32(const float* values, void* out, DType dtype, std::int64_t n) {
  const auto count = static_cast<std::size_t>(n);
  if (dtype == DType::f16) {
    auto* o = static_cast<half*>(out);
    for (std::size_t i = 0; i < count; ++i) o[i] = to_half(values[i]);
  } else {
    require(dtype == DType::bf16, "narrow_from_f32: ", dtype, " is not f16 or bf16");
    auto* o = static_cast<bfloat16*>(out);
    for (std::size_t i = 0; i < count; ++i) o[i] = to_bfloat16(values[i]);
  }
}

std::vector<float> widen_to_f32(const Tensor& tensor) {
  std::vector<float> out(static_cast<std::size_t>(tensor.numel()));
  widen_to_f32(tensor.raw_data(), tensor.dtype(), tensor.numel(), out.data());
  return out;
}

void narrow_from_f32(const float* values, const Tensor& tensor) {
  narrow_from_f32(values, tensor.raw_data(), tensor.dtype(), tensor.numel());
}

void reduce_into(void* out, const std::vector<const void*>& inputs, std::int64_t offset, std::int64_t count,
                 DType dtype, ReduceOp op) {
  switch (dtype) {
    case DType::f32: return reduce_typed(static_cast<float*>(out), inputs, offset, count, op);
    case DType::f16: return reduce_typed(static_cast<half*>(out), inputs, offset, count, op);
    case DType::bf16: return reduce_typed(static_cast<bfloat16*>(out), inputs, offset, count, op);
    case DType::i32: return reduce_typed(static_cast<std::int32_t*>(out), inputs, offset, count, op);
    case DType::i64: return reduce_typed(static_cast<std::int64_t*>(out), inputs, offset, count, op);
    default: fail(ErrorCategory::invalid_argument, "cannot reduce dtype ", dtype);
  }
}

}  // namespace detail
}  // namespace loom::comm
