// GemmBackend::automatic on CUDA tensors, as a table: the first row whose precision, layout and
// shape ranges hold a GEMM chooses its backend; a GEMM no row holds runs cuBLASLt. The table is
// meant to be rewritten from measurements: scripts/gemm-rule.py reads gemm_bench's JSON (loom's own
// kernel against cuBLASLt per shape, precision and layout, from scripts/gpu-check.sh) and prints
// rows for the shapes where loom's kernel won.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "loom/kernels/gemm.hpp"

namespace loom::kernels::detail {

struct GemmRuleRow {
  std::optional<GemmPrecision> precision{};  // nullopt: any
  std::optional<bool> trans_a{}, trans_b{};  // nullopt: either
  std::int64_t min_m = 1, max_m = INT64_MAX;
  std::int64_t min_n = 1, max_n = INT64_MAX;
  std::int64_t min_k = 1, max_k = INT64_MAX;
  GemmBackend backend = GemmBackend::cublaslt;
};

struct GemmCall {
  GemmPrecision precision;
  bool trans_a, trans_b;
  std::int64_t m, n, k;
  bool f32_bias_16bit_output;  // cuBLASLt takes no f32 bias for a 16-bit D; loom's kernel does
};

// The rows automatic uses (see gemm_rule.cpp for their provenance).
std::span<const GemmRuleRow> automatic_gemm_rule();

// The backend for `call` under `requested` (loom or cublaslt are kept, except that a GEMM cuBLASLt
// cannot run goes to loom) with `rule` deciding automatic.
GemmBackend choose_gemm_backend(GemmBackend requested, const GemmCall& call,
                                std::span<const GemmRuleRow> rule = automatic_gemm_rule());

}  // namespace loom::kernels::detail
