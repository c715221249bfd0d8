// Blocking and threading of the CPU fp32 GEMM (see sgemm.hpp). Block sizes were chosen on the
// 2-core AMD EPYC (Zen 3: 32 KiB L1d, 512 KiB L2 per core, 32 MiB L3) by sweeping KC in
// {128..512} and MC in {72..288} against OpenBLAS sgemm in the same run: an A sliver (6 x KC) and a
// B sliver (KC x 16) stay in L1, the packed A block (MC x KC) in L2, the packed B panel in L3.
#include "kernels/cpu/sgemm.hpp"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <new>
#include <vector>

namespace loom::kernels::cpu {

namespace {

using detail::sgemm_mr;
using detail::sgemm_nr;
constexpr std::int64_t kc_block = 384;
constexpr std::int64_t mc_block = 72;     // a multiple of MR
constexpr std::int64_t nc_block = 4080;  // a multiple of NR

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};
using PackBuffer = std::unique_ptr<float[], FreeDeleter>;

PackBuffer allocate_pack(std::int64_t floats) {
  const std::size_t bytes = (static_cast<std::size_t>(floats) * sizeof(float) + 63) / 64 * 64;
  auto* p = static_cast<float*>(std::aligned_alloc(64, std::max<std::size_t>(bytes, 64)));
  if (!p) throw std::bad_alloc();
  return PackBuffer(p);
}

std::int64_t round_up(std::int64_t value, std::int64_t multiple) { return (value + multiple - 1) / multiple * multiple; }

// Rows [0, mc) x depth [0, kc) of A into MR-row slivers, k-major inside a sliver, zero-padded.
// Reads run along A's contiguous direction: down each row when k is contiguous, across the rows
// of a sliver when m is.
void pack_a(std::int64_t mc, std::int64_t kc, const float* a, std::int64_t rs, std::int64_t cs, float* dst) {
  for (std::int64_t i0 = 0; i0 < mc; i0 += sgemm_mr, dst += sgemm_mr * kc) {
    const std::int64_t rows = std::min(sgemm_mr, mc - i0);
    if (rows < sgemm_mr) std::fill_n(dst, sgemm_mr * kc, 0.0f);
    if (cs == 1) {
      for (std::int64_t r = 0; r < rows; ++r) {
        const float* src = a + (i0 + r) * rs;
        for (std::int64_t p = 0; p < kc; ++p) dst[p * sgemm_mr + r] = src[p];
      }
    } else {
      for (std::int64_t p = 0; p < kc; ++p) {
        for (std::int64_t r = 0; r < rows; ++r) dst[p * sgemm_mr + r] = a[(i0 + r) * rs + p * cs];
      }
    }
  }
}

// One NR-column sliver of B (depth kc, `cols` <= NR valid columns), zero-padded. Reads run along
// B's contiguous direction (n for B, k for a transposed B).
void pack_b_sliver(std::int64_t kc, std::int64_t cols, const float* b, std::int64_t rs, std::int64_t cs, float* dst) {
  if (cols < sgemm_nr) std::fill_n(dst, sgemm_nr * kc, 0.0f);
  if (rs == 1 && cs != 1) {
    for (std::int64_t j = 0; j < cols; ++j) {
      const float* src = b + j * cs;
      for (std::int64_t p = 0; p < kc; ++p) dst[p * sgemm_nr + j] = src[p];
    }
    return;
  }
  for (std::int64_t p = 0; p < kc; ++p) {
    const float* src = b + p * rs;
    float* out = dst + p * sgemm_nr;
    if (cols == sgemm_nr && cs == 1) {
      for (std::int64_t j = 0; j < sgemm_nr; ++j) out[j] = src[j];  // two vector moves, not a memmove call
    } else {
      for (std::int64_t j = 0; j < cols; ++j) out[j] = src[j * cs];
    }
  }
}

using MicroKernel = void (*)(std::int64_t, const float*, const float*, float*, std::int64_t, bool);

// C block [mc x nc] from a packed A block and a packed B panel; partial tiles go through a
// scratch tile so the micro-kernel always writes a full MR x NR block.
void macro_kernel(std::int64_t mc, std::int64_t nc, std::int64_t kc, const float* packed_a, const float* packed_b,
                  float* c, std::int64_t ldc, bool accumulate, MicroKernel micro) {
  alignas(64) float scratch[sgemm_mr * sgemm_nr];
  for (std::int64_t jr = 0; jr < nc; jr += sgemm_nr) {
    const std::int64_t cols = std::min(sgemm_nr, nc - jr);
    const float* pb = packed_b + jr * kc;
    for (std::int64_t ir = 0; ir < mc; ir += sgemm_mr) {
      const std::int64_t rows = std::min(sgemm_mr, mc - ir);
      const float* pa = packed_a + ir * kc;
      float* tile = c + ir * ldc + jr;
      if (rows == sgemm_mr && cols == sgemm_nr) {
        micro(kc, pa, pb, tile, ldc, accumulate);
        continue;
      }
      micro(kc, pa, pb, scratch, sgemm_nr, false);
      for (std::int64_t i = 0; i < rows; ++i) {
        for (std::int64_t j = 0; j < cols; ++j) {
          const float sum = scratch[i * sgemm_nr + j];
          tile[i * ldc + j] = accumulate ? tile[i * ldc + j] + sum : sum;
        }
      }
    }
  }
}

}  // namespace

namespace detail {

void sgemm_micro_portable(std::int64_t kc, const float* packed_a, const float* packed_b, float* c, std::int64_t ldc,
                          bool accumulate) {
  float acc[sgemm_mr][sgemm_nr] = {};
  for (std::int64_t p = 0; p < kc; ++p) {
    const float* a = packed_a + p * sgemm_mr;
    const float* b = packed_b + p * sgemm_nr;
    for (std::int64_t i = 0; i < sgemm_mr; ++i) {
      for (std::int64_t j = 0; j < sgemm_nr; ++j) acc[i][j] += a[i] * b[j];
    }
  }
  for (std::int64_t i = 0; i < sgemm_mr; ++i) {
    for (std::int64_t j = 0; j < sgemm_nr; ++j) c[i * ldc + j] = accumulate ? c[i * ldc + j] + acc[i][j] : acc[i][j];
  }
}

}  // namespace detail

SgemmMicroKernel best_sgemm_micro_kernel() {
  static const SgemmMicroKernel best =
      detail::cpu_has_avx2_fma() ? SgemmMicroKernel::avx2_fma : SgemmMicroKernel::portable;
  return best;
}

void sgemm(std::int64_t m, std::int64_t n, std::int64_t k, SgemmOperand a, SgemmOperand b, float* c,
           std::int64_t ldc, int max_threads, SgemmMicroKernel micro_kernel, bool accumulate) {
  if (m <= 0 || n <= 0 || (k <= 0 && accumulate)) return;
  if (k <= 0) {
    for (std::int64_t i = 0; i < m; ++i) std::fill_n(c + i * ldc, n, 0.0f);
    return;
  }
  const MicroKernel micro = micro_kernel == SgemmMicroKernel::avx2_fma ? detail::sgemm_micro_avx2_fma
                                                                       : detail::sgemm_micro_portable;
  const std::int64_t slivers = (m + sgemm_mr - 1) / sgemm_mr;
  const int threads = static_cast<int>(std::clamp<std::int64_t>(max_threads, 1, slivers));
  const std::int64_t kc_max = std::min(kc_block, k);
  const std::int64_t nc_max = std::min(nc_block, round_up(n, sgemm_nr));
  PackBuffer packed_b = allocate_pack(kc_max * nc_max);
  float* const pb = packed_b.get();
  const std::int64_t mc_max = std::min(mc_block, round_up(m, sgemm_mr));
  std::vector<PackBuffer> packed_a(static_cast<std::size_t>(threads));
  for (PackBuffer& buffer : packed_a) buffer = allocate_pack(mc_max * kc_max);

#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const int t = omp_get_thread_num(), parts = omp_get_num_threads();
    // This thread's rows of C, whole MR slivers.
    const std::int64_t row_begin = std::min(m, slivers * t / parts * sgemm_mr);
    const std::int64_t row_end = std::min(m, slivers * (t + 1) / parts * sgemm_mr);
    float* const pa = packed_a[static_cast<std::size_t>(t)].get();
    for (std::int64_t jc = 0; jc < n; jc += nc_block) {
      const std::int64_t nc = std::min(nc_block, n - jc);
      const std::int64_t b_slivers = (nc + sgemm_nr - 1) / sgemm_nr;
      for (std::int64_t pc = 0; pc < k; pc += kc_block) {
        const std::int64_t kc = std::min(kc_block, k - pc);
#pragma omp barrier
#pragma omp for schedule(static)
        for (std::int64_t s = 0; s < b_slivers; ++s) {
          const float* src = b.data + pc * b.row_stride + (jc + s * sgemm_nr) * b.col_stride;
          pack_b_sliver(kc, std::min(sgemm_nr, nc - s * sgemm_nr), src, b.row_stride, b.col_stride,
                        pb + s * sgemm_nr * kc);
        }
        for (std::int64_t ic = row_begin; ic < row_end; ic += mc_block) {
          const std::int64_t mc = std::min(mc_block, row_end - ic);
          pack_a(mc, kc, a.data + ic * a.row_stride + pc * a.col_stride, a.row_stride, a.col_stride, pa);
          macro_kernel(mc, nc, kc, pa, pb, c + ic * ldc + jc, ldc, accumulate || pc > 0, micro);
        }
      }
    }
  }
}

}  // namespace loom::kernels::cpu
