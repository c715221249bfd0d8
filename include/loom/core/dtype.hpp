// Element types of tensors: sizes, names, parsing, and the C++ type of each.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <span>
#include <string_view>

#include "loom/core/numeric.hpp"

namespace loom {

enum class DType : std::uint8_t { f32, f16, bf16, i32, i64, u8, u16 };

inline constexpr DType all_dtypes[] = {DType::f32, DType::f16, DType::bf16, DType::i32,
                                       DType::i64, DType::u8,  DType::u16};

constexpr std::size_t dtype_size(DType dtype) noexcept {
  switch (dtype) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::u8: return 1;
    case DType::u16: return 2;
  }
  return 0;
}

constexpr bool is_floating_point(DType dtype) noexcept {
  return dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16;
}

// Canonical short name: "f32", "f16", "bf16", "i32", "i64", "u8", "u16".
std::string_view dtype_name(DType dtype) noexcept;

// Accepts the canonical names and the usual aliases (float32, fp32, float, float16, fp16, half,
// bfloat16, int32, int, int64, long, uint8, byte, uint16), case-insensitively. Throws an
// invalid_argument Error listing the accepted names otherwise.
DType parse_dtype(std::string_view text);

std::ostream& operator<<(std::ostream& out, DType dtype);

// The C++ element type stored for each dtype, and back.
template <class T> struct dtype_traits;
template <> struct dtype_traits<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_traits<half> { static constexpr DType value = DType::f16; };
template <> struct dtype_traits<bfloat16> { static constexpr DType value = DType::bf16; };
template <> struct dtype_traits<std::int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_traits<std::int64_t> { static constexpr DType value = DType::i64; };
template <> struct dtype_traits<std::uint8_t> { static constexpr DType value = DType::u8; };
template <> struct dtype_traits<std::uint16_t> { static constexpr DType value = DType::u16; };

template <class T>
inline constexpr DType dtype_of = dtype_traits<T>::value;

}  // namespace loom
