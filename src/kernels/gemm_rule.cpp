#include "src/kernels/gemm_rule.hpp"

namespace loom::kernels::detail {

namespace {

// No GPU has measured loom's kernels against cuBLASLt yet, so no row sends a shape to loom: every
// GEMM runs cuBLASLt. Rows go here, most specific first, from scripts/gemm-rule.py's output.
constexpr GemmRuleRow rows[] = {
    {.backend = GemmBackend::cublaslt},
};

bool holds(const GemmRuleRow& row, const GemmCall& call) {
  return (!row.precision || *row.precision == call.precision) && (!row.trans_a || *row.trans_a == call.trans_a) &&
         (!row.trans_b || *row.trans_b == call.trans_b) && call.m >= row.min_m && call.m <= row.max_m &&
         call.n >= row.min_n && call.n <= row.max_n && call.k >= row.min_k && call.k <= row.max_k;
}

}  // namespace

std::span<const GemmRuleRow> automatic_gemm_rule() { return rows; }

GemmBackend choose_gemm_backend(GemmBackend requested, const GemmCall& call, std::span<const GemmRuleRow> rule) {
  if (call.f32_bias_16bit_output) return GemmBackend::loom;
  if (requested != GemmBackend::automatic) return requested;
  for (const GemmRuleRow& row : rule) {
    if (holds(row, call)) return row.backend;
  }
  return GemmBackend::cublaslt;
}

}  // namespace loom::kernels::detail
