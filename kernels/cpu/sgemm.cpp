// Blocking and threading of the CPU fp32 GEMM (see sgemm.hpp). The variant's table gives the
// micro-tile and the cache blocking: an A sliver (mr x kc) and a B sliver (kc x nr) stay in L1, the
// packed A block (mc x kc) in L2, the packed B panel (kc x nc) in L3. Pack buffers are kept per
// thread and grow to the largest size asked for, so steady-state GEMMs allocate nothing.
#include "kernels/cpu/sgemm.hpp"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <memory>
#include <new>

namespace loom::kernels::cpu {

namespace {

std::int64_t round_up(std::int64_t value, std::int64_t multiple) { return (value + multiple - 1) / multiple * multiple; }

// A 64-byte-aligned float buffer that only grows. One per thread and role: OpenMP's threads persist,
// so their buffers are reused by every later GEMM on that thread.
class PackBuffer {
 public:
  float* reserve(std::int64_t floats) {
    if (floats > capacity_) {
      const std::size_t bytes = (static_cast<std::size_t>(floats + sgemm_pack_slack) * sizeof(float) + 63) / 64 * 64;
      auto* p = static_cast<float*>(std::aligned_alloc(64, bytes));
      if (!p) throw std::bad_alloc();
      data_.reset(p);
      capacity_ = floats;
    }
    return data_.get();
  }

 private:
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float[], Free> data_;
  std::int64_t capacity_ = 0;
};

thread_local PackBuffer packed_a_buffer;
thread_local PackBuffer packed_b_buffer;

// Where the block being computed sits, and what may be skipped (SgemmCausal).
struct BlockPosition {
  std::int64_t row, col, depth;  // C row ic, column jc and depth pc of the block's corner
  std::int64_t m;                // rows of C
  SgemmCausal causal;
  bool accumulate;               // the caller's: C += A B
};

// C block [mc x nc] from a packed A block and a packed B panel; partial tiles go through a
// scratch tile so the micro-kernel always writes a full mr x nr block. Each sliver runs the depths
// of this pass its triangle leaves, and adds into C unless this is its first pass.
void macro_kernel(const SgemmKernels& g, std::int64_t mc, std::int64_t nc, std::int64_t kc, const float* packed_a,
                  const float* packed_b, float* c, std::int64_t ldc, const BlockPosition& at) {
  alignas(64) float scratch[sgemm_max_tile];
  for (std::int64_t jr = 0; jr < nc; jr += g.nr) {
    const std::int64_t cols = std::min(g.nr, nc - jr);
    for (std::int64_t ir = 0; ir < mc; ir += g.mr) {
      const std::int64_t rows = std::min(g.mr, mc - ir);
      const std::int64_t first_row = at.row + ir, last_row = first_row + rows - 1;
      if (at.causal == SgemmCausal::c_lower && at.col + jr > last_row) continue;  // wholly above the diagonal
      std::int64_t d0 = 0, d1 = kc;
      bool first_pass = at.depth == 0;
      if (at.causal == SgemmCausal::a_lower) {
        d1 = std::min(kc, last_row + 1 - at.depth);
      } else if (at.causal == SgemmCausal::a_upper) {
        d0 = std::max<std::int64_t>(0, first_row - at.depth);
        first_pass = at.depth <= first_row;
      }
      if (d1 <= d0) continue;
      const bool accumulate = at.accumulate || !first_pass;
      const float* pa = packed_a + ir * kc + d0 * g.mr;
      const float* pb = packed_b + jr * kc + d0 * g.nr;
      float* tile = c + ir * ldc + jr;
      if (rows == g.mr && cols == g.nr) {
        g.micro(d1 - d0, pa, pb, tile, ldc, accumulate);
        continue;
      }
      g.micro(d1 - d0, pa, pb, scratch, g.nr, false);
      for (std::int64_t i = 0; i < rows; ++i) {
        for (std::int64_t j = 0; j < cols; ++j) {
          const float sum = scratch[i * g.nr + j];
          tile[i * ldc + j] = accumulate ? tile[i * ldc + j] + sum : sum;
        }
      }
    }
  }
}

// Whether a pass at depth pc touches any sliver of the A block of rows [row, row + mc).
bool block_in_triangle(SgemmCausal causal, std::int64_t row, std::int64_t mc, std::int64_t m, std::int64_t pc,
                       std::int64_t kc) {
  if (causal == SgemmCausal::a_lower) return pc < std::min(m, row + mc);
  if (causal == SgemmCausal::a_upper) return pc + kc > row;
  return true;
}

}  // namespace

void sgemm(std::int64_t m, std::int64_t n, std::int64_t k, SgemmOperand a, SgemmOperand b, float* c,
           std::int64_t ldc, int max_threads, const CpuKernels& kernels, bool accumulate, SgemmCausal causal) {
  if (m <= 0 || n <= 0 || (k <= 0 && accumulate)) return;
  if (k <= 0) {
    for (std::int64_t i = 0; i < m; ++i) std::fill_n(c + i * ldc, n, 0.0f);
    return;
  }
  const SgemmKernels& g = kernels.sgemm;
  const std::int64_t slivers = (m + g.mr - 1) / g.mr;
  const int threads = static_cast<int>(std::clamp<std::int64_t>(max_threads, 1, slivers));
  const std::int64_t kc_max = std::min(sgemm_kc, k);
  const std::int64_t nc_max = std::min(g.nc, round_up(n, g.nr));
  float* const pb = packed_b_buffer.reserve(kc_max * nc_max);
  const std::int64_t mc_max = std::min(g.mc, round_up(m, g.mr));
  if (causal == SgemmCausal::a_upper && m > k && !accumulate) {
    // Rows at or past k of an upper-triangular A are zero: so are their products.
    for (std::int64_t i = k; i < m; ++i) std::fill_n(c + i * ldc, n, 0.0f);
  }

  // Each thread's A buffer may have to grow, which can throw: no exception may leave an OpenMP
  // region, so a failure is kept, every thread skips the work, and it is rethrown after.
  std::exception_ptr failure;
  bool any_failed = false;
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const int t = omp_get_thread_num(), parts = omp_get_num_threads();
    // This thread's rows of C, whole mr slivers.
    const std::int64_t row_begin = std::min(m, slivers * t / parts * g.mr);
    const std::int64_t row_end = std::min(m, slivers * (t + 1) / parts * g.mr);
    float* pa = nullptr;
    try {
      pa = packed_a_buffer.reserve(mc_max * kc_max);
    } catch (...) {
#pragma omp critical(loom_sgemm_failure)
      {
        if (!failure) failure = std::current_exception();
        any_failed = true;
      }
    }
#pragma omp barrier
    for (std::int64_t jc = 0; jc < n && !any_failed; jc += g.nc) {
      const std::int64_t nc = std::min(g.nc, n - jc);
      const std::int64_t b_slivers = (nc + g.nr - 1) / g.nr;
      for (std::int64_t pc = 0; pc < k; pc += sgemm_kc) {
        const std::int64_t kc = std::min(sgemm_kc, k - pc);
#pragma omp barrier
#pragma omp for schedule(static)
        for (std::int64_t s = 0; s < b_slivers; ++s) {
          const float* src = b.data + pc * b.row_stride + (jc + s * g.nr) * b.col_stride;
          g.pack_b(kc, std::min(g.nr, nc - s * g.nr), src, b.row_stride, b.col_stride, pb + s * g.nr * kc);
        }
        for (std::int64_t ic = row_begin; ic < row_end; ic += g.mc) {
          const std::int64_t mc = std::min(g.mc, row_end - ic);
          if (!block_in_triangle(causal, ic, mc, m, pc, kc)) continue;
          g.pack_a(mc, kc, a.data + ic * a.row_stride + pc * a.col_stride, a.row_stride, a.col_stride, pa);
          macro_kernel(g, mc, nc, kc, pa, pb, c + ic * ldc + jc, ldc, {ic, jc, pc, m, causal, accumulate});
        }
      }
    }
  }
  if (failure) std::rethrow_exception(failure);
}

}  // namespace loom::kernels::cpu
