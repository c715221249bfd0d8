#include "loom/core/dtype.hpp"

#include <algorithm>
#include <cctype>
#include <ostream>
#include <string>

#include "loom/core/error.hpp"

namespace loom {

std::string_view dtype_name(DType dtype) noexcept {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u8: return "u8";
    case DType::u16: return "u16";
  }
  return "invalid";
}

DType parse_dtype(std::string_view text) {
  struct Alias {
    std::string_view name;
    DType dtype;
  };
  static constexpr Alias aliases[] = {
      {"f32", DType::f32},   {"float32", DType::f32},   {"fp32", DType::f32},  {"float", DType::f32},
      {"f16", DType::f16},   {"float16", DType::f16},   {"fp16", DType::f16},  {"half", DType::f16},
      {"bf16", DType::bf16}, {"bfloat16", DType::bf16}, {"i32", DType::i32},   {"int32", DType::i32},
      {"int", DType::i32},   {"i64", DType::i64},       {"int64", DType::i64}, {"long", DType::i64},
      {"u8", DType::u8},     {"uint8", DType::u8},      {"byte", DType::u8},   {"u16", DType::u16},
      {"uint16", DType::u16},
  };
  std::string lower(text);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const Alias& alias : aliases) {
    if (alias.name == lower) return alias.dtype;
  }
  fail(ErrorCategory::invalid_argument, "unknown dtype '", text,
       "'; expected one of f32, f16, bf16, i32, i64, u8, u16 (or float32, fp32, float16, fp16, "
       "half, bfloat16, int32, int64, uint8, uint16)");
}

std::ostream& operator<<(std::ostream& out, DType dtype) { return out << dtype_name(dtype); }

}  // namespace loom
