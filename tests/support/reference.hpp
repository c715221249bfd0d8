// fp64 references and comparison helpers for kernel tests.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "loom/core/numeric.hpp"
#include "loom/core/tensor.hpp"
#include "loom/core/tensor_ops.hpp"

namespace loom::test {

// Fresh random non-zero values in [-1, -0.05] U [0.05, 1], stored in dtype (rounded to it), and
// the exact values that were stored, in double.
struct RandomTensor {
  Tensor tensor;
  std::vector<double> values;
};

// A tensor of dtype holding values rounded to it, and the values as stored.
inline RandomTensor from_doubles(const std::vector<double>& values, const Shape& shape, DType dtype) {
  REQUIRE(static_cast<std::int64_t>(values.size()) == shape.numel());
  RandomTensor out{Tensor::empty(shape, dtype), std::vector<double>(values.size())};
  for (std::size_t i = 0; i < out.values.size(); ++i) {
    const double v = values[i];
    switch (dtype) {
      case DType::f32: {
        const float f = static_cast<float>(v);
        out.tensor.data<float>()[i] = f;
        out.values[i] = f;
        break;
      }
      case DType::f16: {
        const std::uint16_t h = double_to_half_bits(v);
        out.tensor.data<half>()[i] = half{h};
        out.values[i] = half_bits_to_float(h);
        break;
      }
      case DType::bf16: {
        const std::uint16_t h = double_to_bf16_bits(v);
        out.tensor.data<bfloat16>()[i] = bfloat16{h};
        out.values[i] = bf16_bits_to_float(h);
        break;
      }
      default: FAIL("from_doubles supports f32, f16 and bf16");
    }
  }
  return out;
}

// Fresh random non-zero values of magnitude in [0.05, 1] * scale, random sign.
inline RandomTensor random_tensor(const Shape& shape, DType dtype, std::mt19937& rng, double scale = 1.0) {
  std::uniform_real_distribution<double> magnitude(0.05, 1.0);
  std::bernoulli_distribution negative(0.5);
  std::vector<double> values(static_cast<std::size_t>(shape.numel()));
  for (double& v : values) v = (negative(rng) ? -scale : scale) * magnitude(rng);
  return from_doubles(values, shape, dtype);
}

// The elements of a floating tensor as double.
inline std::vector<double> as_doubles(const Tensor& t) {
  if (!is_floating_point(t.dtype())) FAIL("as_doubles supports f32, f16 and bf16");
  return loom::to_doubles(t);
}

// Every element of got within abs_tol + rel_tol * |expected| of expected.
inline void require_close(const Tensor& got, const std::vector<double>& expected, double rel_tol, double abs_tol) {
  const std::vector<double> values = as_doubles(got);
  REQUIRE(values.size() == expected.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    INFO("element " << i << ": got " << values[i] << ", expected " << expected[i]);
    REQUIRE(std::fabs(values[i] - expected[i]) <= abs_tol + rel_tol * std::fabs(expected[i]));
  }
}

// Central finite difference of f at x (in place perturbation of x[i]), in double.
template <class F>
double finite_difference(std::vector<double>& x, std::size_t i, F&& f, double h = 1e-6) {
  const double saved = x[i];
  x[i] = saved + h;
  const double up = f();
  x[i] = saved - h;
  const double down = f();
  x[i] = saved;
  return (up - down) / (2 * h);
}

// GELU (tanh form, GPT-2) in fp64, written from its definition.
inline double gelu64(double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }

// x rounded to TF32 (10 mantissa bits) to nearest with ties away from zero, by value in double.
inline double tf32_round_away(double x) {
  if (x == 0 || !std::isfinite(x)) return x;
  int exponent = 0;
  std::frexp(std::fabs(x), &exponent);
  const double ulp = std::ldexp(1.0, std::max(exponent - 1, -126) - 10);
  return std::copysign(std::floor(std::fabs(x) / ulp + 0.5) * ulp, x);
}

// Relative size of one rounding step of dtype (its unit roundoff times two: one ulp at 1.0).
inline double ulp_of(DType dtype) {
  switch (dtype) {
    case DType::f16: return std::ldexp(1.0, -10);
    case DType::bf16: return std::ldexp(1.0, -7);
    default: return std::ldexp(1.0, -23);
  }
}

}  // namespace loom::test
