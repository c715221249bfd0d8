// The automatic GEMM backend rule: a table whose first matching row decides, cuBLASLt otherwise;
// an explicit backend is kept, and a GEMM cuBLASLt cannot run (f32 bias, 16-bit D) goes to loom.
#include <catch2/catch.hpp>

#include <vector>

#include "src/kernels/gemm_rule.hpp"

using loom::kernels::GemmBackend;
using loom::kernels::GemmPrecision;
using loom::kernels::detail::choose_gemm_backend;
using loom::kernels::detail::GemmCall;
using loom::kernels::detail::GemmRuleRow;

TEST_CASE("the automatic GEMM rule takes the first row that holds the call", "[kernels][gemm]") {
  const GemmCall dw{GemmPrecision::bf16, true, false, 768, 3072, 8192, false};  // a weight gradient
  const GemmCall forward{GemmPrecision::bf16, false, true, 8192, 3072, 768, false};
  // Until measurements add rows, automatic is cuBLASLt everywhere.
  CHECK(choose_gemm_backend(GemmBackend::automatic, dw) == GemmBackend::cublaslt);
  CHECK(choose_gemm_backend(GemmBackend::automatic, forward) == GemmBackend::cublaslt);

  const std::vector<GemmRuleRow> rule = {
      {.precision = GemmPrecision::bf16, .trans_a = true, .min_k = 4096, .backend = GemmBackend::loom},
      {.precision = GemmPrecision::bf16, .trans_a = true, .backend = GemmBackend::cublaslt},
      {.max_m = 1024, .backend = GemmBackend::loom},
  };
  CHECK(choose_gemm_backend(GemmBackend::automatic, dw, rule) == GemmBackend::loom);
  GemmCall short_k = dw;
  short_k.k = 1024;
  CHECK(choose_gemm_backend(GemmBackend::automatic, short_k, rule) == GemmBackend::cublaslt);  // row 2 before row 3
  GemmCall small = forward;
  small.m = 512;
  CHECK(choose_gemm_backend(GemmBackend::automatic, small, rule) == GemmBackend::loom);
  CHECK(choose_gemm_backend(GemmBackend::automatic, forward, rule) == GemmBackend::cublaslt);  // no row: cuBLASLt
  // An explicit choice is kept; a GEMM only loom can run goes to loom.
  CHECK(choose_gemm_backend(GemmBackend::cublaslt, dw, rule) == GemmBackend::cublaslt);
  CHECK(choose_gemm_backend(GemmBackend::loom, forward) == GemmBackend::loom);
  GemmCall f32_bias = forward;
  f32_bias.f32_bias_16bit_output = true;
  CHECK(choose_gemm_backend(GemmBackend::cublaslt, f32_bias) == GemmBackend::loom);
}
