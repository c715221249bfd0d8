#include "loom/core/tensor_ops.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "cuda_runtime.hpp"
#include "loom/core/error.hpp"
#include "loom/core/numeric.hpp"

namespace loom {

namespace {

// The device whose runtime performs an operation touching dst and src, and a check that the
// stream (if given) is on it.
int cuda_device_for(const Tensor& dst, const Tensor& src, StreamRef stream) {
  const Device device = dst.device().is_cuda() ? dst.device() : src.device();
  require(stream.is_default() || stream.device() == device, "copy between ", src.description(),
          " and ", dst.description(), " was given a stream on ", stream.device());
  return device.index();
}

template <class T>
std::uint64_t integer_pattern(double value, DType dtype) {
  // [lowest, 2^digits): the upper bound is exclusive because (double)INT64_MAX rounds up to 2^63.
  const double upper = std::ldexp(1.0, std::numeric_limits<T>::digits);
  require(std::isfinite(value) && std::trunc(value) == value &&
              value >= static_cast<double>(std::numeric_limits<T>::lowest()) && value < upper,
          "fill value ", value, " is not representable in ", dtype);
  using Unsigned = std::make_unsigned_t<T>;
  return static_cast<Unsigned>(static_cast<T>(value));
}

// The bit pattern of value in dtype, in the low dtype_size(dtype) bytes.
std::uint64_t element_pattern(double value, DType dtype) {
  switch (dtype) {
    case DType::f32: return std::bit_cast<std::uint32_t>(narrow_to_float(value));
    case DType::f16: return double_to_half_bits(value);
    case DType::bf16: return double_to_bf16_bits(value);
    case DType::i32: return integer_pattern<std::int32_t>(value, dtype);
    case DType::i64: return integer_pattern<std::int64_t>(value, dtype);
    case DType::u8: return integer_pattern<std::uint8_t>(value, dtype);
    case DType::u16: return integer_pattern<std::uint16_t>(value, dtype);
  }
  fail(ErrorCategory::invalid_argument, "fill: unknown dtype");
}

template <class Word>
void fill_words(void* dst, std::int64_t count, std::uint64_t pattern) {
  std::fill_n(static_cast<Word*>(dst), count, static_cast<Word>(pattern));
}

// count elements of element_size bytes at dst <- the low bytes of pattern.
void fill_pattern(void* dst, std::int64_t count, std::size_t element_size, std::uint64_t pattern) {
  switch (element_size) {
    case 1: fill_words<std::uint8_t>(dst, count, pattern); break;
    case 2: fill_words<std::uint16_t>(dst, count, pattern); break;
    case 4: fill_words<std::uint32_t>(dst, count, pattern); break;
    default: fill_words<std::uint64_t>(dst, count, pattern); break;
  }
}

}  // namespace

void copy(const Tensor& dst, const Tensor& src, StreamRef stream) {
  require(dst.defined() && src.defined(), "copy needs defined tensors, got ", dst.description(),
          " <- ", src.description());
  require(dst.dtype() == src.dtype(), "copy between dtypes: ", dst.description(), " <- ",
          src.description(), " (cast explicitly)");
  require(dst.numel() == src.numel(), "copy between sizes: ", dst.description(), " <- ",
          src.description());
  if (dst.nbytes() == 0 || dst.raw_data() == src.raw_data()) return;
  if (dst.device().is_cpu() && src.device().is_cpu()) {
    require(stream.device().is_cpu(), "a CPU copy was given a stream on ", stream.device());
    std::memmove(dst.raw_data(), src.raw_data(), dst.nbytes());
    return;
  }
  detail::cuda_rt::memcpy(cuda_device_for(dst, src, stream), dst.raw_data(), src.raw_data(), dst.nbytes(),
                          stream.native_handle());
}

void fill(const Tensor& dst, double value, StreamRef stream) {
  require(dst.defined(), "fill on an undefined tensor");
  const std::uint64_t pattern = element_pattern(value, dst.dtype());
  if (dst.numel() == 0) return;
  if (dst.device().is_cuda()) {
    require(stream.is_default() || stream.device() == dst.device(), "fill of ", dst.description(),
            " was given a stream on ", stream.device());
    detail::cuda_rt::fill(dst.device().index(), dst.raw_data(), dst.numel(), pattern, dst.element_size(),
                          stream.native_handle());
    return;
  }
  require(stream.device().is_cpu(), "fill of ", dst.description(), " was given a stream on ",
          stream.device());
  fill_pattern(dst.raw_data(), dst.numel(), dst.element_size(), pattern);
}

Tensor from_doubles(std::span<const double> values, DType dtype, Device device) {
  const Tensor host = Tensor::empty({static_cast<std::int64_t>(values.size())}, dtype);
  auto* bytes = static_cast<unsigned char*>(host.raw_data());
  const std::size_t size = dtype_size(dtype);
  for (std::size_t i = 0; i < values.size(); ++i) fill_pattern(bytes + i * size, 1, size, element_pattern(values[i], dtype));
  return host.to(device);
}

std::vector<double> to_doubles(const Tensor& tensor) {
  require(tensor.defined(), "to_doubles on an undefined tensor");
  const Tensor host = tensor.to(Device::cpu());
  std::vector<double> out(static_cast<std::size_t>(host.numel()));
  for (std::size_t i = 0; i < out.size(); ++i) {
    switch (host.dtype()) {
      case DType::f32: out[i] = host.data<float>()[i]; break;
      case DType::f16: out[i] = to_float(host.data<half>()[i]); break;
      case DType::bf16: out[i] = to_float(host.data<bfloat16>()[i]); break;
      case DType::i32: out[i] = host.data<std::int32_t>()[i]; break;
      case DType::i64: out[i] = static_cast<double>(host.data<std::int64_t>()[i]); break;
      case DType::u8: out[i] = host.data<std::uint8_t>()[i]; break;
      case DType::u16: out[i] = host.data<std::uint16_t>()[i]; break;
    }
  }
  return out;
}

}  // namespace loom
