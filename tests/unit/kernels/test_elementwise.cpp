// GELU, residual add and casts against fp64 references; GELU's backward against finite
// differences of the fp64 forward.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "loom/kernels/cast.hpp"
#include "loom/kernels/elementwise.hpp"
#include "support/reference.hpp"
#include "support/tensor_checks.hpp"

using loom::DType;
using loom::ErrorCategory;
using loom::Tensor;
using loom::test::IsError;

namespace {
using loom::test::gelu64;
const DType floating[] = {DType::f32, DType::f16, DType::bf16};
}  // namespace

TEST_CASE("gelu forward and backward match fp64 and finite differences", "[kernels][gelu]") {
  std::mt19937 rng(11);
  for (DType dtype : floating) {
    INFO(loom::dtype_name(dtype));
    const std::int64_t n = 1037;
    auto x = loom::test::random_tensor({n}, dtype, rng, 4.0);
    auto dout = loom::test::random_tensor({n}, dtype, rng);
    const Tensor out = Tensor::empty({n}, dtype), dx = Tensor::empty({n}, dtype);
    loom::test::poison(out);
    loom::test::poison(dx);
    loom::kernels::gelu_forward(x.tensor, out);
    loom::kernels::gelu_backward(x.tensor, dout.tensor, dx);

    std::vector<double> expected(static_cast<std::size_t>(n)), grad(static_cast<std::size_t>(n));
    for (std::size_t i = 0; i < expected.size(); ++i) {
      expected[i] = gelu64(x.values[i]);
      std::vector<double> point = {x.values[i]};
      grad[i] = dout.values[i] * loom::test::finite_difference(point, 0, [&] { return gelu64(point[0]); });
    }
    const double ulp = loom::test::ulp_of(dtype);
    loom::test::require_close(out, expected, ulp, 1e-6);
    loom::test::require_close(dx, grad, ulp, 1e-5);
  }
}

TEST_CASE("gelu runs in place and residual_add into either input", "[kernels][residual]") {
  std::mt19937 rng(12);
  auto a = loom::test::random_tensor({7, 13}, DType::bf16, rng);
  auto b = loom::test::random_tensor({7, 13}, DType::bf16, rng);
  std::vector<double> sum(a.values.size());
  for (std::size_t i = 0; i < sum.size(); ++i) sum[i] = a.values[i] + b.values[i];
  loom::kernels::residual_add(a.tensor, b.tensor, a.tensor);
  loom::test::require_close(a.tensor, sum, loom::test::ulp_of(DType::bf16), 0);

  auto x = loom::test::random_tensor({100}, DType::f32, rng, 3.0);
  loom::kernels::gelu_forward(x.tensor, x.tensor);
  std::vector<double> expected(x.values.size());
  for (std::size_t i = 0; i < expected.size(); ++i) expected[i] = gelu64(x.values[i]);
  loom::test::require_close(x.tensor, expected, 1e-6, 1e-7);
}

TEST_CASE("elementwise kernels reject mixed dtypes, sizes and devices", "[kernels][residual]") {
  const Tensor a = Tensor::zeros({4}, DType::f32);
  CHECK_THROWS_MATCHES(loom::kernels::residual_add(a, Tensor::zeros({4}, DType::bf16), a), loom::Error,
                       IsError(ErrorCategory::invalid_argument, {"residual_add", "'b' is bf16"}));
  CHECK_THROWS_MATCHES(loom::kernels::residual_add(a, Tensor::zeros({5}, DType::f32), a), loom::Error,
                       IsError(ErrorCategory::invalid_argument, {"residual_add", "'b' must have 4 elements"}));
  CHECK_THROWS_MATCHES(loom::kernels::gelu_forward(Tensor::zeros({4}, DType::i32), Tensor::zeros({4}, DType::i32)),
                       loom::Error, IsError(ErrorCategory::invalid_argument, {"gelu_forward", "f32, f16 or bf16"}));
  CHECK_THROWS_MATCHES(loom::kernels::gelu_forward(Tensor(), a), loom::Error,
                       IsError(ErrorCategory::invalid_argument, {"'x' is an undefined tensor"}));
}

TEST_CASE("casts round to nearest even between every pair of floating dtypes", "[kernels][cast]") {
  std::mt19937 rng(13);
  for (DType from : floating) {
    for (DType to : floating) {
      INFO(loom::dtype_name(from) << " -> " << loom::dtype_name(to));
      auto src = loom::test::random_tensor({501}, from, rng, 100.0);
      const Tensor dst = Tensor::empty({501}, to);
      loom::test::poison(dst);
      loom::kernels::cast(src.tensor, dst);
      // The reference: the stored source values rounded once to the target dtype.
      loom::test::require_close(dst, loom::test::from_doubles(src.values, {501}, to).values, 0, 0);
    }
  }
}

TEST_CASE("a scaled cast multiplies in fp32 before its one rounding", "[kernels][cast]") {
  std::mt19937 rng(17);
  for (DType to : floating) {
    INFO("f32 -> " << loom::dtype_name(to));
    auto src = loom::test::random_tensor({333}, DType::f32, rng, 100.0);
    const Tensor dst = Tensor::empty({333}, to);
    loom::test::poison(dst);
    loom::kernels::CastOptions options;
    options.scale = 0.25f;  // a power of two: the product is exact in fp32 and double alike
    loom::kernels::cast(src.tensor, dst, options);
    std::vector<double> scaled(src.values);
    for (double& v : scaled) v *= 0.25;
    loom::test::require_close(dst, loom::test::from_doubles(scaled, {333}, to).values, 0, 0);
  }
  // 1/3 is not a power of two: the reference is the fp32 product, rounded once to f16.
  const Tensor src = Tensor::from_vector(std::vector<float>{3.0f, 1000.0f, -7.0f}, {3});
  const Tensor dst = Tensor::empty({3}, DType::f16);
  loom::kernels::CastOptions third;
  third.scale = 1.0f / 3.0f;
  loom::kernels::cast(src, dst, third);
  const std::vector<double> products{3.0f * third.scale, 1000.0f * third.scale, -7.0f * third.scale};
  loom::test::require_close(dst, loom::test::from_doubles(products, {3}, DType::f16).values, 0, 0);
}

TEST_CASE("stochastic rounding to bf16 is unbiased, reproducible and lands on a neighbour", "[kernels][cast]") {
  // 1 + 2^-9 lies a quarter of the way from bf16 1.0 to the next bf16 value, 1 + 2^-7.
  const float value = 1.0f + std::ldexp(1.0f, -9);
  const std::int64_t n = 200000;
  const Tensor src = Tensor::full({n}, DType::f32, value);
  const Tensor dst = Tensor::empty({n}, DType::bf16);
  loom::kernels::CastOptions options;
  options.rounding = loom::kernels::Rounding::stochastic;
  options.seed = 1234;
  loom::kernels::cast(src, dst, options);
  double sum = 0;
  int up = 0;
  for (loom::bfloat16 v : dst.span<loom::bfloat16>()) {
    REQUIRE((v.bits == 0x3f80 || v.bits == 0x3f81));
    up += v.bits == 0x3f81;
    sum += loom::to_float(v);
  }
  CHECK(std::fabs(static_cast<double>(up) / n - 0.25) < 0.01);           // P(up) = 1/4
  CHECK(std::fabs(sum / n - static_cast<double>(value)) < 1e-4);          // unbiased on average
  const Tensor again = Tensor::empty({n}, DType::bf16);
  loom::kernels::cast(src, again, options);
  CHECK(again.as_bytes().to_vector<std::uint8_t>() == dst.as_bytes().to_vector<std::uint8_t>());
  options.seed = 1235;
  loom::kernels::cast(src, again, options);
  CHECK(again.as_bytes().to_vector<std::uint8_t>() != dst.as_bytes().to_vector<std::uint8_t>());
  // Values already in bf16, infinities and NaNs are kept.
  const Tensor special = Tensor::from_vector(std::vector<float>{1.5f, -INFINITY, NAN, 0.0f}, {4});
  const Tensor special_out = Tensor::empty({4}, DType::bf16);
  loom::kernels::cast(special, special_out, options);
  const auto bits = special_out.to_vector<loom::bfloat16>();
  CHECK(bits[0].bits == 0x3fc0);
  CHECK(bits[1].bits == 0xff80);
  CHECK(std::isnan(loom::to_float(bits[2])));
  CHECK(bits[3].bits == 0);
  CHECK_THROWS_MATCHES(loom::kernels::cast(Tensor::zeros({2}, DType::f32), Tensor::zeros({2}, DType::f16), options),
                       loom::Error, IsError(ErrorCategory::invalid_argument, {"stochastic", "f32 -> bf16 only"}));
}
