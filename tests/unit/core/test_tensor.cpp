#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "loom/core/tensor.hpp"
#include "loom/core/tensor_ops.hpp"
#include "support/tensor_checks.hpp"

using loom::Device;
using loom::DType;
using loom::ErrorCategory;
using loom::Shape;
using loom::Tensor;
using loom::test::IsError;

namespace {
Tensor iota_f32(const Shape& shape) {
  std::vector<float> values(static_cast<std::size_t>(shape.numel()));
  std::iota(values.begin(), values.end(), 0.0f);
  return Tensor::from_vector(values, shape);
}
}  // namespace

TEST_CASE("tensors know their shape, dtype, device and size", "[tensor]") {
  const Tensor t = Tensor::empty({3, 5}, DType::bf16);
  CHECK(t.defined());
  CHECK(t.shape() == Shape{3, 5});
  CHECK(t.dtype() == DType::bf16);
  CHECK(t.device() == Device::cpu());
  CHECK(t.numel() == 15);
  CHECK(t.nbytes() == 30);
  CHECK(t.size(-1) == 5);
  CHECK(reinterpret_cast<std::uintptr_t>(t.raw_data()) % loom::cpu_alignment == 0);
  CHECK(t.description() == "Tensor(bf16, (3, 5), cpu)");
  CHECK_FALSE(Tensor().defined());
  // Element counts that fit in int64 but whose byte size does not are refused before allocating.
  CHECK_THROWS_MATCHES(Tensor::empty({(std::int64_t{1} << 62) + 1}, DType::f32), loom::Error,
                       IsError(ErrorCategory::invalid_argument, {"2^63-1 bytes", "f32"}));
  CHECK_THROWS_AS(Tensor::from_blob(reinterpret_cast<void*>(64), {std::int64_t{1} << 61}, DType::i64, Device::cpu()),
                  loom::Error);
  CHECK_THROWS_MATCHES(Tensor().raw_data(), loom::Error, IsError(ErrorCategory::invalid_argument, {"undefined"}));
}

TEST_CASE("typed access checks the dtype, the device and the bounds", "[tensor]") {
  const Tensor t = iota_f32({2, 3});
  CHECK(t.at<float>({1, 2}) == 5.0f);
  t.at<float>({0, 1}) = 42.0f;
  CHECK(t.span<float>()[1] == 42.0f);
  CHECK(t.data<float>()[1] == 42.0f);
  CHECK_THROWS_MATCHES(t.data<std::int32_t>(), loom::Error,
                       IsError(ErrorCategory::invalid_argument, {"i32", "Tensor(f32, (2, 3), cpu)"}));
  CHECK_THROWS_MATCHES(t.at<float>({2, 0}), loom::Error,
                       IsError(ErrorCategory::invalid_argument, {"index 2", "[0, 2)", "dimension 0"}));
  CHECK_THROWS_MATCHES(t.at<float>({0}), loom::Error, IsError(ErrorCategory::invalid_argument, {"1 coordinates"}));
  CHECK_THROWS_MATCHES(t.item<float>(), loom::Error, IsError(ErrorCategory::invalid_argument, {"one element"}));
  CHECK(t.slice(1, 2).select(0).slice(2, 3).item<float>() == 5.0f);
}

TEST_CASE("from_vector copies and checks the element count", "[tensor]") {
  std::vector<std::int64_t> values = {1, -2, 3};
  const Tensor t = Tensor::from_vector(values, {3});
  values[0] = 100;
  CHECK(t.to_vector<std::int64_t>() == std::vector<std::int64_t>{1, -2, 3});
  CHECK_THROWS_MATCHES(Tensor::from_vector(values, {2, 2}), loom::Error,
                       IsError(ErrorCategory::invalid_argument, {"3 values", "(2, 2)"}));
}

TEST_CASE("views and slices share storage without copying", "[tensor]") {
  const Tensor t = iota_f32({4, 3});
  const Tensor rows = t.slice(1, 3);
  CHECK(rows.shape() == Shape{2, 3});
  CHECK(rows.shares_storage_with(t));
  CHECK(rows.data<float>() == t.data<float>() + 3);
  CHECK(rows.to_vector<float>() == std::vector<float>{3, 4, 5, 6, 7, 8});

  const Tensor flat = t.flatten();
  CHECK(flat.shape() == Shape{12});
  // A gradient-bucket style view: a flat range reshaped to a parameter's shape.
  const Tensor param = flat.slice(2, 8).view({3, 2});
  CHECK(param.at<float>({2, 1}) == 7.0f);
  param.at<float>({0, 0}) = -1.0f;
  CHECK(t.at<float>({0, 2}) == -1.0f);  // written through the view

  const Tensor row = t.select(3);
  CHECK(row.shape() == Shape{3});
  CHECK(row.to_vector<float>() == std::vector<float>{9, 10, 11});
  CHECK(t.slice(2, 2).numel() == 0);

  CHECK_THROWS_MATCHES(t.view({5, 2}), loom::Error, IsError(ErrorCategory::invalid_argument, {"(5, 2)", "10 elements"}));
  CHECK_THROWS_MATCHES(t.slice(3, 5), loom::Error, IsError(ErrorCategory::invalid_argument, {"[3, 5)"}));
  CHECK_THROWS_MATCHES(t.slice(2, 1), loom::Error, IsError(ErrorCategory::invalid_argument, {"[2, 1)"}));
  CHECK_THROWS_MATCHES(t.select(4), loom::Error, IsError(ErrorCategory::invalid_argument, {"select(4)"}));
  CHECK_THROWS_AS(Tensor::empty({}, DType::f32).slice(0, 1), loom::Error);
}

TEST_CASE("storage lives as long as its last view", "[tensor]") {
  Tensor view;
  {
    const Tensor owner = iota_f32({8});
    view = owner.slice(6, 8);
  }
  CHECK(view.to_vector<float>() == std::vector<float>{6, 7});
}

TEST_CASE("from_blob wraps foreign memory and calls its release once", "[tensor]") {
  std::vector<std::int32_t> buffer = {5, 6, 7, 8};
  int releases = 0;
  {
    const Tensor t = Tensor::from_blob(buffer.data(), {2, 2}, DType::i32, Device::cpu(), [&](void* ptr) {
      CHECK(ptr == buffer.data());
      ++releases;
    });
    const Tensor copy = t;  // NOLINT(performance-unnecessary-copy-initialization): shares storage
    t.at<std::int32_t>({1, 1}) = 80;
    CHECK(buffer[3] == 80);
  }
  CHECK(releases == 1);
}

TEST_CASE("fill converts the value to each dtype and writes every element", "[tensor][ops]") {
  const Tensor f32 = Tensor::empty({5, 7}, DType::f32);
  loom::test::poison(f32);
  loom::fill(f32, 0.1);
  for (float v : f32.span<float>()) REQUIRE(v == 0.1f);

  // Crafted: just above the midpoint between two f16 (bf16) values; rounding through float first
  // would land on the midpoint and round down to the even neighbour.
  const double above_f16_tie = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -30);
  const Tensor f16 = Tensor::full({9}, DType::f16, above_f16_tie);
  for (loom::half v : f16.span<loom::half>()) REQUIRE(v.bits == 0x3c01);
  const Tensor bf16 = Tensor::full({3}, DType::bf16, -(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30)));
  for (loom::bfloat16 v : bf16.span<loom::bfloat16>()) REQUIRE(v.bits == 0xbf81);
  CHECK(Tensor::full({1}, DType::f32, 1e300).item<float>() == INFINITY);
  CHECK(Tensor::full({1}, DType::f16, 65520.0).item<loom::half>().bits == 0x7c00);

  CHECK(Tensor::full({2}, DType::i64, -9007199254740992.0).to_vector<std::int64_t>() ==
        std::vector<std::int64_t>{-9007199254740992LL, -9007199254740992LL});
  CHECK(Tensor::full({3}, DType::u8, 255).to_vector<std::uint8_t>() == std::vector<std::uint8_t>{255, 255, 255});
  CHECK(Tensor::zeros({4}, DType::u16).to_vector<std::uint16_t>() == std::vector<std::uint16_t>(4, 0));

  CHECK_THROWS_MATCHES(Tensor::full({1}, DType::u8, 256), loom::Error,
                       IsError(ErrorCategory::invalid_argument, {"256", "u8"}));
  CHECK_THROWS_MATCHES(Tensor::full({1}, DType::i32, 1.5), loom::Error,
                       IsError(ErrorCategory::invalid_argument, {"1.5", "i32"}));
  CHECK_THROWS_AS(Tensor::full({1}, DType::i32, NAN), loom::Error);
  CHECK_THROWS_MATCHES(Tensor::full({1}, DType::i64, 9223372036854775808.0), loom::Error,
                       IsError(ErrorCategory::invalid_argument, {"i64"}));  // 2^63: one past INT64_MAX
  CHECK(Tensor::full({1}, DType::i64, 9223372036854774784.0).item<std::int64_t>() == 9223372036854774784LL);
  CHECK(std::isnan(Tensor::full({1}, DType::f32, NAN).item<float>()));
}

TEST_CASE("fill and copy through a slice touch only the slice", "[tensor][ops]") {
  const Tensor t = Tensor::zeros({4, 2}, DType::i32);
  loom::fill(t.slice(1, 3), 7);
  CHECK(t.to_vector<std::int32_t>() == std::vector<std::int32_t>{0, 0, 7, 7, 7, 7, 0, 0});
  loom::copy(t.slice(3, 4), Tensor::from_vector(std::vector<std::int32_t>{-1, -2}, {1, 2}));
  CHECK(t.to_vector<std::int32_t>() == std::vector<std::int32_t>{0, 0, 7, 7, 7, 7, -1, -2});
}

TEST_CASE("copy checks dtypes and sizes, and allows reshaping copies", "[tensor][ops]") {
  const Tensor src = iota_f32({2, 3});
  const Tensor dst = Tensor::empty({3, 2}, DType::f32);
  loom::test::poison(dst);
  loom::copy(dst, src);
  CHECK(dst.to_vector<float>() == src.to_vector<float>());
  CHECK_FALSE(dst.shares_storage_with(src));

  CHECK_THROWS_MATCHES(loom::copy(Tensor::empty({6}, DType::bf16), src), loom::Error,
                       IsError(ErrorCategory::invalid_argument, {"dtypes", "bf16", "f32"}));
  CHECK_THROWS_MATCHES(loom::copy(Tensor::empty({5}, DType::f32), src), loom::Error,
                       IsError(ErrorCategory::invalid_argument, {"sizes", "(5)", "(2, 3)"}));
  CHECK_THROWS_AS(loom::copy(Tensor(), src), loom::Error);
}

TEST_CASE("clone and to() copy, except to() the same device, which shares", "[tensor][ops]") {
  const Tensor t = iota_f32({3});
  const Tensor c = t.clone();
  c.at<float>({0}) = 9.0f;
  CHECK(t.at<float>({0}) == 0.0f);
  CHECK(t.to(Device::cpu()).shares_storage_with(t));
}

TEST_CASE("as_bytes views the same memory as unsigned bytes", "[tensor]") {
  const Tensor t = Tensor::from_vector(std::vector<std::uint16_t>{0x1234, 0xabcd}, {2});
  const Tensor bytes = t.as_bytes();
  CHECK(bytes.dtype() == DType::u8);
  CHECK(bytes.numel() == 4);
  CHECK(bytes.shares_storage_with(t));
  CHECK(bytes.to_vector<std::uint8_t>() == std::vector<std::uint8_t>{0x34, 0x12, 0xcd, 0xab});  // little endian
  const Tensor tail_bytes = t.slice(1, 2).as_bytes();
  CHECK(tail_bytes.to_vector<std::uint8_t>() == std::vector<std::uint8_t>{0xcd, 0xab});
}
