// GEMM on the CPU against an fp64 reference computed here from the stored input values (rounded to
// TF32 first for tf32), over transposes, odd sizes, batches with broadcast, padded leading
// dimensions, alpha/beta, every precision and output dtype, and each epilogue.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <optional>
#include <random>
#include <tuple>
#include <vector>

#include "loom/kernels/elementwise.hpp"
#include "loom/kernels/gemm.hpp"
#include "support/reference.hpp"
#include "support/tensor_checks.hpp"

using loom::DType;
using loom::ErrorCategory;
using loom::Shape;
using loom::Tensor;
using loom::kernels::Activation;
using loom::kernels::GemmOptions;
using loom::kernels::GemmPrecision;
using loom::kernels::StridedMatrix;
using loom::test::IsError;

namespace {

struct Case {
  std::int64_t batch = 1, m = 1, n = 1, k = 1;
  bool trans_a = false, trans_b = false;
  GemmPrecision precision = GemmPrecision::fp32;
  DType output = DType::f32;
  bool broadcast_b = false;   // one B for every batch (batch stride 0)
  std::int64_t pad = 0;       // extra elements per row: ld = cols + pad
  float alpha = 1.0f, beta = 0.0f;
  bool bias = false, gelu = false, bias_grad = false;
};

DType test_input_dtype(GemmPrecision p) {
  return p == GemmPrecision::fp16 ? DType::f16 : p == GemmPrecision::bf16 ? DType::bf16 : DType::f32;
}

// A random operand stored as `batch` matrices of rows x cols with ld = cols + pad.
struct Operand {
  StridedMatrix matrix;
  std::vector<double> values;  // as stored, indexed like the tensor
  double at(std::int64_t b, std::int64_t r, std::int64_t c) const {
    const std::int64_t base = (matrix.batch == 1 ? 0 : b) * matrix.batch_stride;
    return values[static_cast<std::size_t>(base + r * matrix.ld + c)];
  }
};

Operand make_operand(std::int64_t batch, std::int64_t rows, std::int64_t cols, std::int64_t pad, DType dtype,
                     std::mt19937& rng) {
  auto random = loom::test::random_tensor(Shape{batch, rows, cols + pad}, dtype, rng);
  Operand op{StridedMatrix::of(random.tensor), std::move(random.values)};
  op.matrix.cols = cols;
  op.matrix.ld = cols + pad;
  op.matrix.batch_stride = rows * (cols + pad);
  return op;
}

void run_case(const Case& cs, std::mt19937& rng) {
  const DType input = test_input_dtype(cs.precision);
  const std::int64_t batch_b = cs.broadcast_b ? 1 : cs.batch;
  const Operand a = cs.trans_a ? make_operand(cs.batch, cs.k, cs.m, cs.pad, input, rng)
                               : make_operand(cs.batch, cs.m, cs.k, cs.pad, input, rng);
  const Operand b = cs.trans_b ? make_operand(batch_b, cs.n, cs.k, cs.pad, input, rng)
                               : make_operand(batch_b, cs.k, cs.n, cs.pad, input, rng);
  const Operand c = make_operand(cs.batch, cs.m, cs.n, cs.pad, cs.output, rng);
  const auto bias = loom::test::random_tensor(Shape{cs.n}, input, rng);

  // D is C itself when beta != 0 (in place); otherwise a fresh poisoned tensor.
  StridedMatrix d = c.matrix;
  if (cs.beta == 0.0f) {
    const Tensor fresh = Tensor::empty({cs.batch, cs.m, cs.n + cs.pad}, cs.output);
    loom::test::poison(fresh);
    d.tensor = fresh;
  }
  GemmOptions options;
  options.trans_a = cs.trans_a;
  options.trans_b = cs.trans_b;
  options.alpha = cs.alpha;
  options.beta = cs.beta;
  options.precision = cs.precision;
  if (cs.bias) options.epilogue.bias = bias.tensor;
  if (cs.gelu) {
    options.epilogue.activation = Activation::gelu;
    options.epilogue.pre_activation = Tensor::empty({cs.batch, cs.m, cs.n}, cs.output);
    loom::test::poison(options.epilogue.pre_activation);
  }
  if (cs.bias_grad) {
    options.epilogue.bias_grad = Tensor::empty({cs.m}, DType::f32);
    loom::test::poison(options.epilogue.bias_grad);
  }
  const std::vector<double> c_before = c.values;
  loom::kernels::gemm(a.matrix, b.matrix, cs.beta != 0.0f ? std::optional(c.matrix) : std::nullopt, d, options);

  const std::vector<double> got = loom::test::as_doubles(d.tensor);
  const std::vector<double> pre = cs.gelu ? loom::test::as_doubles(options.epilogue.pre_activation) : std::vector<double>{};
  const double out_ulp = loom::test::ulp_of(cs.output);
  const double f32_eps = std::ldexp(1.0, -24);
  auto rounded = [&](double v) { return cs.precision == GemmPrecision::tf32 ? loom::test::tf32_round_away(v) : v; };
  std::vector<double> bias_grad(static_cast<std::size_t>(cs.m), 0.0);
  for (std::int64_t bt = 0; bt < cs.batch; ++bt) {
    for (std::int64_t i = 0; i < cs.m; ++i) {
      for (std::int64_t j = 0; j < cs.n; ++j) {
        double sum = 0, sum_abs = 0;
        for (std::int64_t kk = 0; kk < cs.k; ++kk) {
          const double x = rounded(cs.trans_a ? a.at(bt, kk, i) : a.at(bt, i, kk));
          const double y = rounded(cs.trans_b ? b.at(bt, j, kk) : b.at(bt, kk, j));
          sum += x * y;
          sum_abs += std::fabs(x * y);
        }
        const double c_value = c_before[static_cast<std::size_t>(bt * c.matrix.batch_stride + i * c.matrix.ld + j)];
        double value = cs.alpha * sum + cs.beta * c_value + (cs.bias ? bias.values[static_cast<std::size_t>(j)] : 0.0);
        const double magnitude = std::fabs(cs.alpha) * sum_abs + std::fabs(cs.beta * c_value) + 1.0;
        // fp32 accumulation over k terms, a few fp32 epilogue operations, one output rounding.
        double tolerance = (cs.k + 4) * f32_eps * magnitude + out_ulp * std::fabs(value);
        const std::size_t index = static_cast<std::size_t>(bt * d.batch_stride + i * d.ld + j);
        INFO("batch " << bt << " row " << i << " col " << j);
        if (cs.gelu) {
          REQUIRE(std::fabs(pre[static_cast<std::size_t>((bt * cs.m + i) * cs.n + j)] - value) <= tolerance);
          value = loom::test::gelu64(value);
          tolerance = 1.2 * tolerance + out_ulp * std::fabs(value);
        }
        REQUIRE(std::fabs(got[index] - value) <= tolerance);
      }
      if (cs.bias_grad) {
        for (std::int64_t kk = 0; kk < cs.k; ++kk) {
          bias_grad[static_cast<std::size_t>(i)] += cs.trans_a ? a.at(bt, kk, i) : a.at(bt, i, kk);
        }
      }
    }
  }
  if (cs.bias_grad) {
    const std::vector<double> got_grad = loom::test::as_doubles(options.epilogue.bias_grad);
    for (std::int64_t i = 0; i < cs.m; ++i) {
      REQUIRE(std::fabs(got_grad[static_cast<std::size_t>(i)] - bias_grad[static_cast<std::size_t>(i)]) <=
              (cs.k * cs.batch + 1) * f32_eps * (cs.k * cs.batch));
    }
  }
  // Padding between rows of D is never written.
  if (cs.pad > 0 && cs.beta == 0.0f) {
    const auto bytes = d.tensor.as_bytes().to_vector<std::uint8_t>();
    const std::size_t element = loom::dtype_size(cs.output);
    const std::size_t pad_start = static_cast<std::size_t>(cs.n) * element;
    for (std::size_t byte = pad_start; byte < static_cast<std::size_t>(cs.n + cs.pad) * element; ++byte) {
      REQUIRE(bytes[byte] == loom::test::poison_byte);
    }
  }
}

}  // namespace

TEST_CASE("fp32 GEMM matches fp64 over transposes and odd sizes", "[gemm]") {
  std::mt19937 rng(1);
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (auto [m, n, k] : std::vector<std::tuple<int, int, int>>{{1, 1, 1}, {7, 5, 3}, {33, 17, 65}, {130, 70, 257}}) {
        Case cs;
        cs.m = m, cs.n = n, cs.k = k, cs.trans_a = ta, cs.trans_b = tb;
        INFO("m=" << m << " n=" << n << " k=" << k << " ta=" << ta << " tb=" << tb);
        run_case(cs, rng);
      }
    }
  }
}

TEST_CASE("GEMM in every precision and output dtype", "[gemm]") {
  std::mt19937 rng(2);
  const std::pair<GemmPrecision, DType> modes[] = {
      {GemmPrecision::tf32, DType::f32}, {GemmPrecision::fp16, DType::f32}, {GemmPrecision::fp16, DType::f16},
      {GemmPrecision::bf16, DType::f32}, {GemmPrecision::bf16, DType::bf16}};
  for (auto [precision, output] : modes) {
    Case cs;
    cs.m = 37, cs.n = 29, cs.k = 71, cs.precision = precision, cs.output = output, cs.trans_b = true;
    INFO(loom::kernels::to_string(precision) << " -> " << loom::dtype_name(output));
    run_case(cs, rng);
  }
}

TEST_CASE("batched GEMM with broadcast B, padded leading dimensions and in-place alpha/beta", "[gemm]") {
  std::mt19937 rng(3);
  Case cs;
  cs.batch = 3, cs.m = 19, cs.n = 23, cs.k = 31, cs.pad = 5, cs.broadcast_b = true;
  run_case(cs, rng);
  cs.alpha = -0.5f, cs.beta = 2.0f, cs.trans_a = true;
  run_case(cs, rng);
  cs.precision = GemmPrecision::bf16, cs.output = DType::bf16, cs.broadcast_b = false;
  run_case(cs, rng);
}

TEST_CASE("GEMM epilogues: bias, GELU with the pre-activation kept, bias gradient", "[gemm]") {
  std::mt19937 rng(4);
  Case cs;
  cs.m = 45, cs.n = 38, cs.k = 27, cs.bias = true;
  run_case(cs, rng);
  cs.gelu = true;
  run_case(cs, rng);
  cs.precision = GemmPrecision::bf16, cs.output = DType::bf16, cs.batch = 2;
  run_case(cs, rng);
  Case grad;
  grad.batch = 2, grad.m = 16, grad.n = 9, grad.k = 50, grad.trans_a = true, grad.bias_grad = true;
  run_case(grad, rng);
}

TEST_CASE("the CPU GEMM's bias and GELU give the bits of a separate pass over the product", "[gemm]") {
  // The f32 GEMM adds the bias in its micro-kernel and, with GELU, writes the product into the kept
  // pre-activation and runs GELU from there (D += with GELU: the bias in the micro-kernel, GELU in the
  // epilogue). Reference: the plain product, then fl(p + bias[j]) and gelu_forward of that, element
  // by element: what the separate epilogue pass gave. Shapes: the Linear layers' (one pass, and
  // k = 600 in two), ragged tiles; fresh D and D += (beta 1, C = D), each with and without GELU.
  std::mt19937 rng(21);
  struct Size {
    std::int64_t m, n, k;
  };
  for (const Size& s : {Size{100, 384, 128}, Size{37, 50, 600}, Size{3, 7, 5}}) {
    for (const bool accumulate : {false, true}) {
      for (const bool gelu : {false, true}) {
        INFO("m=" << s.m << " n=" << s.n << " k=" << s.k << " accumulate=" << accumulate << " gelu=" << gelu);
        const Tensor x = loom::test::random_tensor(Shape{s.m, s.k}, DType::f32, rng).tensor;
        const Tensor w = loom::test::random_tensor(Shape{s.n, s.k}, DType::f32, rng).tensor;
        const Tensor bias = loom::test::random_tensor(Shape{s.n}, DType::f32, rng, 50.0).tensor;
        const Tensor start = loom::test::random_tensor(Shape{s.m, s.n}, DType::f32, rng).tensor;
        GemmOptions plain;
        plain.trans_b = true;
        plain.beta = accumulate ? 1.0f : 0.0f;
        const Tensor product = start.clone();
        loom::kernels::gemm(x, w, product, plain);
        std::vector<float> expected = product.to_vector<float>();
        const std::vector<float> b = bias.to_vector<float>();
        for (std::size_t at = 0; at < expected.size(); ++at) expected[at] += b[at % static_cast<std::size_t>(s.n)];
        const Tensor expected_pre = Tensor::from_vector(expected, {s.m, s.n});
        const Tensor expected_out = Tensor::empty({s.m, s.n}, DType::f32);
        loom::kernels::gelu_forward(expected_pre, expected_out);

        GemmOptions fused = plain;
        fused.epilogue.bias = bias;
        const Tensor pre = Tensor::full({s.m, s.n}, DType::f32, std::nanf(""));
        if (gelu) {
          fused.epilogue.activation = Activation::gelu;
          fused.epilogue.pre_activation = pre;
        }
        const Tensor out = start.clone();
        loom::kernels::gemm(x, w, out, fused);
        REQUIRE(out.to_vector<float>() == (gelu ? expected_out : expected_pre).to_vector<float>());
        if (gelu) REQUIRE(pre.to_vector<float>() == expected);
      }
    }
  }
}

TEST_CASE("GEMM with an empty dimension: N = 0 keeps the bias gradient, K = 0 gives beta C + bias, GELU", "[gemm]") {
  // The reference the CUDA backends are held to (tests/cuda/test_cuda_gemm_edges.cpp).
  std::mt19937 rng(9);
  for (GemmPrecision precision : {GemmPrecision::fp32, GemmPrecision::bf16}) {
    for (bool trans_a : {false, true}) {
      Case cs;
      cs.precision = precision, cs.trans_a = trans_a, cs.pad = 1, cs.batch = 2;  // pad: rows of no element have ld 1
      cs.bias = cs.gelu = cs.bias_grad = true;
      cs.alpha = 0.5f, cs.beta = 2.0f;
      cs.m = 13, cs.n = 0, cs.k = 21;  // no D, but bias_grad[i] = the sum of op(A)'s row i
      run_case(cs, rng);
      cs.m = 0, cs.n = 11, cs.k = 21;
      run_case(cs, rng);
      cs.m = 13, cs.n = 11, cs.k = 0;  // D = beta C + bias, GELU; bias_grad = 0
      run_case(cs, rng);
    }
  }
  // An empty tensor is a valid operand (its rows have a leading dimension of 1).
  const Tensor a = Tensor::zeros({4, 0}, DType::f32), b = Tensor::zeros({0, 3}, DType::f32);
  const Tensor d = Tensor::full({4, 3}, DType::f32, 5);
  loom::kernels::gemm(a, b, d);
  REQUIRE(d.to_vector<float>() == std::vector<float>(12, 0.0f));
}

TEST_CASE("TF32 rounds the inputs and fp32 does not", "[gemm]") {
  // 1 + 2^-12 is below TF32's half step at 1 (2^-11): as TF32 it is exactly 1.
  const float x = 1.0f + std::ldexp(1.0f, -12);
  const Tensor a = Tensor::full({1, 1}, DType::f32, x);
  const Tensor b = Tensor::full({1, 1}, DType::f32, x);
  const Tensor d = Tensor::empty({1, 1}, DType::f32);
  loom::kernels::gemm(a, b, d, {});
  CHECK(d.item<float>() == x * x);
  GemmOptions tf32;
  tf32.precision = GemmPrecision::tf32;
  loom::kernels::gemm(a, b, d, tf32);
  CHECK(d.item<float>() == 1.0f);
}

TEST_CASE("GEMM arguments are validated with messages that name the problem", "[gemm]") {
  const Tensor a = Tensor::zeros({4, 3}, DType::f32);
  const Tensor b = Tensor::zeros({5, 6}, DType::f32);
  const Tensor d = Tensor::zeros({4, 6}, DType::f32);
  CHECK_THROWS_MATCHES(loom::kernels::gemm(a, b, d), loom::Error,
                       IsError(ErrorCategory::invalid_argument, {"inner dimensions", "4 x 3", "5 x 6"}));
  GemmOptions bf16;
  bf16.precision = GemmPrecision::bf16;
  CHECK_THROWS_MATCHES(loom::kernels::gemm(a, Tensor::zeros({3, 6}, DType::f32), d, bf16), loom::Error,
                       IsError(ErrorCategory::invalid_argument, {"bf16", "needs bf16 inputs", "A f32"}));
  CHECK_THROWS_MATCHES(loom::kernels::gemm(a, Tensor::zeros({3, 6}, DType::f32), Tensor::zeros({4, 6}, DType::bf16)),
                       loom::Error, IsError(ErrorCategory::invalid_argument, {"output must be f32", "bf16"}));
  CHECK_THROWS_MATCHES(loom::kernels::gemm(a, Tensor::zeros({3, 6}, DType::f32), Tensor::zeros({4, 5}, DType::f32)),
                       loom::Error, IsError(ErrorCategory::invalid_argument, {"D is 4 x 5", "4 x 6"}));
  StridedMatrix too_long = StridedMatrix::of(a);
  too_long.ld = 4;  // 4 rows x ld 4 needs 15 elements; the tensor has 12
  CHECK_THROWS_MATCHES(loom::kernels::gemm(too_long, StridedMatrix::of(Tensor::zeros({3, 6}, DType::f32)), std::nullopt,
                                           StridedMatrix::of(d), {}),
                       loom::Error, IsError(ErrorCategory::invalid_argument, {"operand A", "past the end"}));
  GemmOptions with_beta;
  with_beta.beta = 1.0f;
  CHECK_THROWS_MATCHES(loom::kernels::gemm(StridedMatrix::of(a), StridedMatrix::of(Tensor::zeros({3, 6}, DType::f32)),
                                           std::nullopt, StridedMatrix::of(d), with_beta),
                       loom::Error, IsError(ErrorCategory::invalid_argument, {"needs C"}));
  GemmOptions bad_bias;
  bad_bias.epilogue.bias = Tensor::zeros({5}, DType::f32);
  CHECK_THROWS_MATCHES(loom::kernels::gemm(a, Tensor::zeros({3, 6}, DType::f32), d, bad_bias), loom::Error,
                       IsError(ErrorCategory::invalid_argument, {"bias must be [6]"}));
  GemmOptions pre_on_a;
  pre_on_a.epilogue.activation = Activation::gelu;
  const Tensor a_and_pre = Tensor::zeros({2, 24}, DType::f32);  // A in row 0 (4 x 3 of it), the pre-activation in row 1
  pre_on_a.epilogue.pre_activation = a_and_pre.flatten().slice(24, 48).view({4, 6});
  CHECK_THROWS_MATCHES(loom::kernels::gemm(a_and_pre.flatten().slice(0, 12).view({4, 3}), Tensor::zeros({3, 6}, DType::f32),
                                           d, pre_on_a),
                       loom::Error, IsError(ErrorCategory::invalid_argument, {"pre_activation", "share storage with A"}));
  CHECK_THROWS_MATCHES(loom::kernels::parse_gemm_precision("fp8"), loom::Error,
                       IsError(ErrorCategory::invalid_argument, {"'fp8'", "tf32"}));
}
