// The one dispatch point of the CPU kernels: a table of the hot fp32 loops for each instruction
// set (isa_portable.cpp, isa_avx2.cpp, isa_avx512.cpp), and cpu_kernels(), the table of the
// variant this process runs (loom::kernels::active_cpu_isa()). The kernels in kernels/cpu handle
// dtypes, threads and argument layout, and call through the table for the arithmetic; every entry
// is serial and computes the same bits in every variant.
#pragma once

#include <cstdint>

#include "loom/kernels/cpu_isa.hpp"

namespace loom::kernels::cpu {

// How a GEMM micro-kernel reads its mr rows of A, element (i, p):
//   packed   a packed sliver, a[p * mr + i] (lda unused);
//   rows     the caller's matrix with the depth contiguous, a[i * lda + p];
//   columns  the caller's matrix with the rows contiguous, a[i + p * lda].
enum class SgemmALayout { packed, rows, columns };

// The GEMM engine's register blocking and its kernels (see sgemm.hpp); the cache blocking is chosen
// at run time from the CPU's caches (sgemm_blocking.hpp).
struct SgemmKernels {
  std::int64_t mr = 0, nr = 0;  // the micro-tile of C
  // c[mr x nr] (ldc) = (accumulate ? c : 0) + sum over kc of A[mr] x packed_b[nr], each element
  // summed in ascending k with fused multiply-adds; then, when bias is not null, + bias[nr] on every
  // row, a separate rounding (the bits of adding it to the stored tile). One kernel per SgemmALayout.
  using Micro = void (*)(std::int64_t kc, const float* a, std::int64_t lda, const float* packed_b, float* c,
                         std::int64_t ldc, bool accumulate, const float* bias);
  Micro micro = nullptr;          // packed
  Micro micro_a_rows = nullptr;   // rows
  Micro micro_a_columns = nullptr;  // columns
  // Rows [0, rows) x depth [0, kc) of A (element (i, p) at a[i * rs + p * cs]) into mr-row slivers,
  // k-major inside a sliver, zero-padded to whole slivers.
  void (*pack_a)(std::int64_t rows, std::int64_t kc, const float* a, std::int64_t rs, std::int64_t cs,
                 float* dst) = nullptr;
  // Columns [0, cols) of B (depth kc; element (p, j) at b[p * rs + j * cs]) into nr-column slivers,
  // each kc x nr, zero-padded to whole slivers.
  void (*pack_b)(std::int64_t kc, std::int64_t cols, const float* b, std::int64_t rs, std::int64_t cs,
                 float* dst) = nullptr;
  // A sliver of r < mr rows (the last of each thread's even share of C's rows; at 1 thread, 2 of
  // m = 128 at mr = 14):
  // micro_tail[r] computes just those r rows x nr, A read in the columns layout (a packed sliver,
  // lda = mr), so the FMAs of the mr - r missing rows are not spent. Each element is the same sum as
  // micro's, so the same bits.
  static constexpr int max_mr = 16;
  Micro micro_tail[max_mr] = {};
};
// The depth of one pass, the same in every variant and on every CPU: it fixes the summation order
// of C (a pass's partial sum is added into C), so it is not part of the run-time blocking.
inline constexpr std::int64_t sgemm_kc = 384;
// Packing may write this many floats past the last sliver (isa_sgemm_kernels.hpp, simd/avx_common.hpp), and no
// micro-tile is larger than sgemm_max_tile floats.
inline constexpr std::int64_t sgemm_pack_slack = 16;
inline constexpr std::int64_t sgemm_max_tile = 16 * 32;

// AdamW's per-step constants: p -= decay p + lr m_hat / (sqrt(v_hat) + eps).
struct AdamWConstants {
  float beta1, beta2, bias_correction1, bias_correction2, lr, eps, decay, grad_scale;
};

// One row of a GEMM epilogue: out = act(alpha product + beta c + bias), pre = the value before the
// activation (when not null). c and bias may be null; all fp32, n elements.
struct EpilogueRow {
  const float* product;
  const float* c;
  float alpha, beta;
  const float* bias;
  float* pre;
  float* out;
  std::int64_t n;
  bool gelu;
};

struct CpuKernels {
  CpuIsa isa = CpuIsa::portable;
  SgemmKernels sgemm;

  // Elementwise over n floats (out may alias an input).
  void (*exp)(const float* x, float* out, std::int64_t n) = nullptr;
  void (*gelu_forward)(const float* x, float* out, std::int64_t n) = nullptr;
  void (*gelu_backward)(const float* x, const float* dout, float* dx, std::int64_t n) = nullptr;
  void (*add)(const float* a, const float* b, float* out, std::int64_t n) = nullptr;
  void (*epilogue_row)(const EpilogueRow& row) = nullptr;

  // LayerNorm over `rows` contiguous rows of `channels`.
  void (*layernorm_forward)(const float* x, const float* weight, const float* bias, float* out, float* mean,
                            float* rstd, std::int64_t rows, std::int64_t channels, float eps) = nullptr;
  // dx = LayerNorm's input gradient, plus residual (same layout as dx) when it is not null: the sum
  // is the one `add` gives, so fusing it changes no bit.
  void (*layernorm_backward)(const float* dout, const float* x, const float* weight, const float* mean,
                             const float* rstd, const float* residual, float* dx, std::int64_t rows,
                             std::int64_t channels) = nullptr;
  // dweight[c] = sum over rows of norm(x) dout, dbias[c] = sum of dout, rows in order, for the
  // channels [0, count) of rows `stride` apart starting at the given pointers.
  void (*layernorm_param_grads)(const float* dout, const float* x, const float* mean, const float* rstd,
                                std::int64_t rows, std::int64_t stride, std::int64_t count, float* dweight,
                                float* dbias) = nullptr;

  // One row of n: the softmax of x_scale times its first `kept` entries (x_scale > 0), zeros after
  // them; its backward over the first `kept` entries, zeros after them.
  void (*softmax_forward)(const float* x, float* out, std::int64_t n, std::int64_t kept, float x_scale) = nullptr;
  void (*softmax_backward)(const float* y, const float* dy, float* dx, std::int64_t n, std::int64_t kept) = nullptr;
  // softmax_forward over rows [0, rows) of a causal block (rows n apart), row r keeping min(r + 1, n)
  // entries: each row's bits as softmax_forward gives them (out may be x).
  void (*softmax_forward_causal)(const float* x, float* out, std::int64_t rows, std::int64_t n, float x_scale) = nullptr;
  // One row of vocab logits: log(sum(exp(row))) - row[target]; and its gradient times dloss into out
  // (which may be row itself).
  float (*cross_entropy_forward)(const float* row, std::int64_t vocab, std::int64_t target) = nullptr;
  void (*cross_entropy_backward)(const float* row, float* out, std::int64_t vocab, std::int64_t target,
                                 float dloss) = nullptr;

  void (*adamw)(float* param, float* m, float* v, const float* grad, std::int64_t n,
                const AdamWConstants& c) = nullptr;
  // sum of x^2 in double, 16 lanes reduced in the fixed tree.
  double (*sum_of_squares)(const float* x, std::int64_t n) = nullptr;
  // sums[j] += sum over rows of a[r * ld + j], j < cols, in double, rows in order.
  void (*column_sums)(const float* a, std::int64_t rows, std::int64_t cols, std::int64_t ld, double* sums) = nullptr;
};

// The tables, one per variant compiled into this build (avx2 and avx512 on x86 only).
extern const CpuKernels portable_kernels;
#if defined(__x86_64__)
extern const CpuKernels avx2_kernels;
extern const CpuKernels avx512_kernels;
#endif

// The table of the given variant; an invalid_argument Error when the CPU cannot run it.
const CpuKernels& cpu_kernels(CpuIsa isa);
// The table of active_cpu_isa(), looked up once.
const CpuKernels& cpu_kernels();

}  // namespace loom::kernels::cpu
