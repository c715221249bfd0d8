// Blocking and threading of the CPU fp32 GEMM (see sgemm.hpp). The variant's table gives the
// micro-tile, sgemm_blocking.hpp the cache blocking chosen for this CPU's caches: which sliver stays in
// L1 (SgemmL1), the A block (mc x kc) and the packed B panel (kc x nc).
// Pack buffers are kept per thread and grow to the largest size asked for, so steady-state GEMMs
// allocate nothing.
#include "kernels/cpu/sgemm.hpp"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>

#include "kernels/cpu/region_failure.hpp"
#include "loom/core/error.hpp"

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
thread_local PackBuffer copied_a_buffer;

// A copied pass of A (sgemm_copies_a) keeps its rows this many floats apart past the deepest pass:
// 400 floats at k >= 384, 1600 bytes, so the rows of a sliver fall in different L1 sets.
constexpr std::int64_t copied_a_pad = 16;

// Where the block being computed sits, and what may be skipped (SgemmCausal).
struct BlockPosition {
  std::int64_t row, col, depth;  // C row ic, column jc and depth pc of the block's corner
  std::int64_t m;                // rows of C
  SgemmCausal causal;
  bool accumulate;               // the caller's: C += A B
  SgemmALayout a_layout;         // how whole A slivers are read (partial ones are packed)
  const float* bias;             // on the last pass: the bias of the block's columns, else null
};

// One A sliver's share of a pass: where the micro-kernel reads it, which depths its triangle leaves
// ([d0, d1) of this pass), how many columns of C it reaches, and whether it adds into C.
struct ASliver {
  const float* data;
  std::int64_t lda;
  SgemmKernels::Micro micro;
  std::int64_t rows, d0, d1, nc_live;
  bool accumulate;
  bool all_rows;  // the micro-kernel writes exactly `rows` rows (a whole sliver, or a tail kernel)
};

// The sliver of rows [ir, ir + mr) of the block (`a`: the A block, from its corner); false when this
// pass has nothing for it. Whole slivers of an A whose rows or depth are contiguous are read in
// place, the others packed into `packed` (when `pack`: a sliver used again is packed once).
bool plan_sliver(const SgemmKernels& g, std::int64_t ir, std::int64_t mc, std::int64_t nc, std::int64_t kc,
                 const SgemmOperand& a, float* packed, bool pack, const BlockPosition& at, ASliver& s) {
  s.rows = std::min(g.mr, mc - ir);
  const std::int64_t first_row = at.row + ir, last_row = first_row + s.rows - 1;
  // C below the diagonal only: the column slivers that start past the last row are skipped.
  s.nc_live = at.causal == SgemmCausal::c_lower ? std::min(nc, last_row + 1 - at.col) : nc;
  s.d0 = 0;
  s.d1 = kc;
  bool first_pass = at.depth == 0;
  if (at.causal == SgemmCausal::a_lower) {
    s.d1 = std::min(kc, last_row + 1 - at.depth);
  } else if (at.causal == SgemmCausal::a_upper) {
    s.d0 = std::max<std::int64_t>(0, first_row - at.depth);
    first_pass = at.depth <= first_row;
  }
  if (s.nc_live <= 0 || s.d1 <= s.d0) return false;
  s.accumulate = at.accumulate || !first_pass;
  const float* a_rows = a.data + ir * a.row_stride;
  const SgemmALayout layout = s.rows == g.mr ? at.a_layout : SgemmALayout::packed;
  if (layout == SgemmALayout::packed && pack) g.pack_a(s.rows, kc, a_rows, a.row_stride, a.col_stride, packed);
  s.data = layout == SgemmALayout::packed ? packed + s.d0 * g.mr
           : layout == SgemmALayout::rows ? a_rows + s.d0
                                          : a_rows + s.d0 * a.col_stride;
  s.micro = layout == SgemmALayout::packed ? g.micro : layout == SgemmALayout::rows ? g.micro_a_rows : g.micro_a_columns;
  s.lda = layout == SgemmALayout::rows ? a.row_stride : a.col_stride;
  s.all_rows = s.rows == g.mr;
  if (!s.all_rows && g.micro_tail[s.rows] != nullptr) {  // the packed sliver's rows, read as columns
    s.micro = g.micro_tail[s.rows];
    s.lda = g.mr;
    s.all_rows = true;
  }
  return true;
}

// C tile (ir, jr) of the block; a tile short of columns, or of rows without a tail kernel, goes
// through a scratch tile that the micro-kernel can write whole.
void run_tile(const SgemmKernels& g, const ASliver& s, std::int64_t ir, std::int64_t jr, std::int64_t nc,
              std::int64_t kc, const float* packed_b, float* c, std::int64_t ldc, const float* bias, float* scratch) {
  const std::int64_t cols = std::min(g.nr, nc - jr);
  const float* pb = packed_b + jr * kc + s.d0 * g.nr;
  float* tile = c + ir * ldc + jr;
  const float* tile_bias = bias ? bias + jr : nullptr;
  if (s.all_rows && cols == g.nr) {
    s.micro(s.d1 - s.d0, s.data, s.lda, pb, tile, ldc, s.accumulate, tile_bias);
    return;
  }
  s.micro(s.d1 - s.d0, s.data, s.lda, pb, scratch, g.nr, false, nullptr);
  for (std::int64_t i = 0; i < s.rows; ++i) {
    for (std::int64_t j = 0; j < cols; ++j) {
      const float sum = s.accumulate ? tile[i * ldc + j] + scratch[i * g.nr + j] : scratch[i * g.nr + j];
      tile[i * ldc + j] = tile_bias ? sum + tile_bias[j] : sum;
    }
  }
}

// Whether the A blocks are packed whole, a block at a time before their products (macro_kernel),
// rather than sliver by sliver: a packed transposed A (sgemm_packs_columns, or a blocking without
// a_in_place), whose depths' runs over the block's rows are then each read in one sweep.
bool packs_whole_blocks(SgemmALayout layout, const SgemmOperand& a) {
  return layout == SgemmALayout::packed && a.row_stride == 1;
}

// C block [mc x nc] from an A block (`a`, from its corner) and a packed B panel, in the blocking's
// order (SgemmL1). Each sliver runs the depths of this pass its triangle leaves, and adds into C
// unless this is its first pass. With the A sliver outer, a packed sliver goes into one buffer that
// stays in L1; with the B sliver outer, into sliver ir of the block's, once, at the first column
// sliver (a sliver skipped there is skipped in every column), so the packing's reads overlap the
// products before it. A transposed A that is packed (sgemm_packs_columns) is packed whole, first,
// in either order: sliver ir at ir * kc.
void macro_kernel(SgemmL1 l1, const SgemmKernels& g, std::int64_t mc, std::int64_t nc, std::int64_t kc,
                  const SgemmOperand& a, float* packed_a, const float* packed_b, float* c, std::int64_t ldc,
                  const BlockPosition& at) {
  alignas(64) float scratch[sgemm_max_tile];
  ASliver s{};
  // Each depth's run over the block's rows is read once, in one sweep, rather than a line (and a
  // page) per depth for each sliver of mr rows: measured 3-12% faster than sliver by sliver with AVX2
  // on the Xeon (GPT-2 small's dW shapes), the same within noise with AVX-512.
  const bool block_packed = packs_whole_blocks(at.a_layout, a);
  if (block_packed) g.pack_a(mc, kc, a.data, a.row_stride, a.col_stride, packed_a);
  if (l1 == SgemmL1::a_sliver) {
    for (std::int64_t ir = 0; ir < mc; ir += g.mr) {
      if (!plan_sliver(g, ir, mc, nc, kc, a, block_packed ? packed_a + ir * kc : packed_a, !block_packed, at, s)) {
        continue;
      }
      for (std::int64_t jr = 0; jr < s.nc_live; jr += g.nr) run_tile(g, s, ir, jr, nc, kc, packed_b, c, ldc, at.bias, scratch);
    }
    return;
  }
  for (std::int64_t jr = 0; jr < nc; jr += g.nr) {
    for (std::int64_t ir = 0; ir < mc; ir += g.mr) {
      if (!plan_sliver(g, ir, mc, nc, kc, a, packed_a + ir * kc, jr == 0 && !block_packed, at, s) || jr >= s.nc_live) {
        continue;
      }
      run_tile(g, s, ir, jr, nc, kc, packed_b, c, ldc, at.bias, scratch);
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

// Rows a multiple of 4 KiB apart fall in the same L1 set (every L1 this engine runs on has 4 KiB per
// way). Read in place, such an A is streamed from L3 again for every B panel, and measured 3-7%
// slower than one a little wider (Zen 5, 1024 x 768 x 1024 against x 1152); copied, each element is
// read from the caller's A once and the copy, rows 1600 bytes apart, for every panel. The copy is one
// more read and write of A, paid back only by the panels after the first: with n under two panels
// (Xeon's 672-column panels at n = 768 and 1024, measured before panels were split evenly) it
// measured 1-4% slower, so it needs n >= 2 nc. In the B-sliver order (AVX2 on Zen 5) it measured no
// faster, up to 4% slower.
bool sgemm_copies_a(const SgemmBlocking& blocking, std::int64_t m, std::int64_t n, SgemmOperand a,
                    SgemmCausal causal, int threads) {
  constexpr std::int64_t l1_way_bytes = 4096;
  const std::int64_t parts = std::max(threads, 1), rows_per_thread = (m + parts - 1) / parts;
  return blocking.l1 == SgemmL1::a_sliver && blocking.a_in_place && a.col_stride == 1 &&
         causal == SgemmCausal::none && n >= 2 * blocking.nc && rows_per_thread <= sgemm_max_copied_rows &&
         (a.row_stride * static_cast<std::int64_t>(sizeof(float))) % l1_way_bytes == 0;
}

// A transposed A (the dW = dY^T X of a linear layer's backward: rows contiguous, depths lda apart)
// read in place puts each depth of a sliver on a page of its own once lda reaches a page: the
// micro-kernel then walks kc pages per sliver and column sliver, more than the L1 TLB holds, and
// their lines all fall in a few L1 sets. Measured at GPT-2 small's widths (Xeon, 1 thread, dW of
// 3072 x 768 x 1024): 0.38-0.42 (AVX-512) and 0.58-0.63 (AVX2) of the 1024^3 peak in place, packed
// 2.3x and 1.4-1.6x faster. Below a page it stays in place: in the A-sliver order (AVX-512's) an A
// sliver read in place is brought into L1 once for a whole panel of B slivers, and packing measured
// up to 14% slower (AVX-512, lda 384-512 at n = 128). (The B-sliver order's blockings pack every A:
// choose_sgemm_blocking.)
bool sgemm_packs_columns(SgemmOperand a) {
  constexpr std::int64_t page_bytes = 4096;
  return a.row_stride == 1 && a.col_stride * static_cast<std::int64_t>(sizeof(float)) >= page_bytes;
}

// The rows' counterpart of the panels below, for the B-sliver order. There each block of rows is one
// more sweep over the B panel, from L3 (the panel is sized for it), and a block of a sliver or two
// makes that sweep with almost no products to hide it behind: Zen 3's blocking (mc 168) left 1024
// rows a last block of 16, and 512 rows (a thread's half at 2 threads) one of 8. With Zen 3's
// blocking on the Xeon, even blocks in a first form (one height rounded up to whole slivers for
// every block) ran issue 35's six GEMMs in 0.99-1.01x the time at 2 threads (1024 x 3072 x 768:
// 0.987x, 0.954 -> 0.974 of OpenBLAS) and 0.97-1.03x at 1, within the noise. That height rounds back
// up to mc once blocks are many (4537 rows at mc 168: 27 of 168 and one of 1), so the slivers are
// shared out instead.
SgemmRowBlocks sgemm_row_blocks(std::int64_t rows, std::int64_t mc, std::int64_t unit) {
  if (unit <= 0 || mc < unit || mc % unit != 0) {
    fail(ErrorCategory::invalid_argument, "sgemm_row_blocks: blocks of at most ", mc, " rows are not whole units of ",
         unit, " rows");
  }
  SgemmRowBlocks blocks{std::max<std::int64_t>(rows, 0), unit, 0, 0};
  blocks.units = (blocks.rows + unit - 1) / unit;
  const std::int64_t per_block = mc / unit;  // whole units: mc is a multiple of unit
  blocks.count = (blocks.units + per_block - 1) / per_block;
  return blocks;
}

std::int64_t SgemmRowBlocks::begin(std::int64_t b) const {
  return count == 0 ? 0 : std::min(rows, units * b / count * unit);
}

// A last panel of a sliver or two (n = 2048 in 672-column panels: 32 columns) still takes a whole
// sweep over A in each pass, and uses each A sliver brought into L1 for only one or two B slivers.
// Even panels ran 1024^3 and 2048^3 0.1-2.5% faster in all five runs on the Xeon (AVX2 and AVX-512,
// 1 and 2 threads), n = 768 and 2304 -1% to +2%, n = 3072 the same within noise.
std::int64_t sgemm_panel_columns(std::int64_t n, std::int64_t nc, std::int64_t nr) {
  if (n <= 0) return nc;
  const std::int64_t panels = (n + nc - 1) / nc;
  return round_up((n + panels - 1) / panels, nr);
}

void sgemm(std::int64_t m, std::int64_t n, std::int64_t k, SgemmOperand a, SgemmOperand b, float* c,
           std::int64_t ldc, int max_threads, const CpuKernels& kernels, bool accumulate, SgemmCausal causal,
           const float* bias) {
  sgemm_blocked(sgemm_blocking(kernels).for_columns(n), m, n, k, a, b, c, ldc, max_threads, kernels, accumulate, causal,
                bias);
}

namespace {

// The engine with C's rows split between up to max_threads threads (sgemm_blocked's checks done).
void sgemm_rows(const SgemmBlocking& blocking, std::int64_t m, std::int64_t n, std::int64_t k, SgemmOperand a,
                SgemmOperand b, float* c, std::int64_t ldc, int max_threads, const CpuKernels& kernels,
                bool accumulate, SgemmCausal causal, const float* bias) {
  const SgemmKernels& g = kernels.sgemm;
  const std::int64_t slivers = (m + g.mr - 1) / g.mr;
  const int threads = static_cast<int>(std::clamp<std::int64_t>(max_threads, 1, slivers));
  const std::int64_t mc_block = blocking.mc, nc_block = sgemm_panel_columns(n, blocking.nc, g.nr);
  const SgemmALayout a_layout = !blocking.a_in_place ? SgemmALayout::packed
                                 : a.col_stride == 1 ? SgemmALayout::rows
                                 : a.row_stride == 1 && !sgemm_packs_columns(a) ? SgemmALayout::columns
                                                                                 : SgemmALayout::packed;
  const std::int64_t kc_max = std::min(sgemm_kc, k);
  float* const pb = packed_b_buffer.reserve(kc_max * nc_block);  // a panel is at most round_up(n, nr)
  if (causal == SgemmCausal::a_upper && m > k && !accumulate) {
    // Rows at or past k of an upper-triangular A are zero: so are their products.
    for (std::int64_t i = k; i < m; ++i) std::fill_n(c + i * ldc, n, 0.0f);
  }

  // Each thread's A buffer may have to grow, which can throw: no exception may leave an OpenMP
  // region, so a failure is kept, every thread skips the work, and it is rethrown after.
  RegionFailure failure;
  // Thread t of parts. The barriers run only in a team of several: one thread may be inside another
  // team (attention's heads call this one per thread), whose barrier is not this GEMM's.
  const auto team_barrier = [](int parts) {
    if (parts > 1) {
#pragma omp barrier
    }
  };
  const auto run_thread = [&](int t, int parts) {
    // This thread's rows of C, an even share: its last sliver may be short, and a tail kernel
    // (SgemmKernels::micro_tail) spends only its rows' FMAs on it.
    const std::int64_t row_begin = m * t / parts, row_end = m * (t + 1) / parts;
    // Decided on the team's real size, the same in every thread, so all run the same loops (a nested
    // or limited region may have fewer threads than asked for, each with more rows).
    const bool copy_a = sgemm_copies_a(blocking, m, n, a, causal, parts);
    // Even blocks in the B-sliver order only (sgemm_row_blocks); the A-sliver order's B panel stays in
    // L2, and its blocks measured no faster even (AVX2 wide form, 2 threads: 0.98-1.04x the time), so
    // it shares out whole blocks of mc: blocks of mc and what is left.
    const SgemmRowBlocks row_blocks =
        sgemm_row_blocks(row_end - row_begin, mc_block, blocking.l1 == SgemmL1::b_sliver ? g.mr : mc_block);
    float* pa = nullptr;
    float* a_copy = nullptr;
    failure.capture([&] {
      // The A-sliver order packs one sliver at a time into the same buffer; the B-sliver order keeps
      // the block's packed slivers for every column sliver, and so does a transposed A packed a block
      // at a time (macro_kernel) in either order.
      const bool whole_blocks = blocking.l1 == SgemmL1::b_sliver || packs_whole_blocks(a_layout, a);
      const std::int64_t a_rows = whole_blocks ? std::min(mc_block, round_up(m, g.mr)) : g.mr;
      pa = packed_a_buffer.reserve(a_rows * kc_max);
      if (copy_a) a_copy = copied_a_buffer.reserve((row_end - row_begin) * (kc_max + copied_a_pad));
    });
    team_barrier(parts);
    // Pass pc of panel jc: the threads pack the panel's B together, then each runs its blocks of rows.
    const auto run_pass = [&](std::int64_t jc, std::int64_t pc, const float* copy, std::int64_t ld_copy) {
      const std::int64_t nc = std::min(nc_block, n - jc), kc = std::min(sgemm_kc, k - pc);
      const std::int64_t b_slivers = (nc + g.nr - 1) / g.nr;
      team_barrier(parts);
      {
        // Each thread packs a contiguous run of the panel's slivers.
        const std::int64_t s0 = b_slivers * t / parts, s1 = b_slivers * (t + 1) / parts;
        if (s1 > s0) {
          const float* src = b.data + pc * b.row_stride + (jc + s0 * g.nr) * b.col_stride;
          g.pack_b(kc, std::min((s1 - s0) * g.nr, nc - s0 * g.nr), src, b.row_stride, b.col_stride,
                   pb + s0 * g.nr * kc);
        }
      }
      team_barrier(parts);
      for (std::int64_t blk = 0; blk < row_blocks.count; ++blk) {
        const std::int64_t ic = row_begin + row_blocks.begin(blk), mc = row_blocks.begin(blk + 1) - row_blocks.begin(blk);
        if (!block_in_triangle(causal, ic, mc, m, pc, kc)) continue;
        const SgemmOperand block = copy ? SgemmOperand{copy + (ic - row_begin) * ld_copy, ld_copy, 1}
                                        : SgemmOperand{a.data + ic * a.row_stride + pc * a.col_stride,
                                                       a.row_stride, a.col_stride};
        macro_kernel(blocking.l1, g, mc, nc, kc, block, pa, pb, c + ic * ldc + jc, ldc,
                     {ic, jc, pc, m, causal, accumulate, a_layout, bias && pc + kc >= k ? bias + jc : nullptr});
      }
    };
    if (!failure.failed() && copy_a) {
      // Passes outer: this thread's rows of each pass are copied once and read for every panel. Each
      // element of C still gets its passes in ascending order, so the same bits.
      const std::int64_t ld_copy = kc_max + copied_a_pad;
      for (std::int64_t pc = 0; pc < k; pc += sgemm_kc) {
        const std::int64_t kc = std::min(sgemm_kc, k - pc);
        for (std::int64_t i = row_begin; i < row_end; ++i) {
          std::memcpy(a_copy + (i - row_begin) * ld_copy, a.data + i * a.row_stride + pc, kc * sizeof(float));
        }
        for (std::int64_t jc = 0; jc < n; jc += nc_block) run_pass(jc, pc, a_copy, ld_copy);
      }
    } else {
      for (std::int64_t jc = 0; jc < n && !failure.failed(); jc += nc_block) {
        for (std::int64_t pc = 0; pc < k; pc += sgemm_kc) run_pass(jc, pc, nullptr, 0);
      }
    }
  };
  // One thread runs without a parallel region: entering one, even of one thread, cost libgomp a
  // team, an allocation and futex calls, 0.6-0.9 us a GEMM on the Xeon, which the per-head GEMMs of
  // attention paid hundreds of times a step.
  if (threads > 1) {
#pragma omp parallel num_threads(threads)
    run_thread(omp_get_thread_num(), omp_get_num_threads());
  } else {
    run_thread(0, 1);
  }
  failure.rethrow();
}

// C's column slivers split between up to max_threads threads, each running the engine alone on its
// share: its own B panels, all of A, no barrier. (Not in a causal mode: c_lower places the diagonal
// by column.)
void sgemm_columns(const SgemmBlocking& blocking, std::int64_t m, std::int64_t n, std::int64_t k, SgemmOperand a,
                   SgemmOperand b, float* c, std::int64_t ldc, int max_threads, const CpuKernels& kernels,
                   bool accumulate, const float* bias) {
  const std::int64_t nr = kernels.sgemm.nr, slivers = (n + nr - 1) / nr;
  const int team = static_cast<int>(std::clamp<std::int64_t>(max_threads, 1, slivers));
  if (team == 1) {  // (a split asked for with one sliver: no region for one thread)
    sgemm_rows(blocking, m, n, k, a, b, c, ldc, 1, kernels, accumulate, SgemmCausal::none, bias);
    return;
  }
  RegionFailure failure;
#pragma omp parallel num_threads(team)
  {
    // Thread t of the team it got (a nested region may have fewer): whole slivers, the last short.
    const std::int64_t t = omp_get_thread_num(), parts = omp_get_num_threads();
    const std::int64_t j0 = std::min(n, slivers * t / parts * nr), j1 = std::min(n, slivers * (t + 1) / parts * nr);
    // The B-sliver order's panel is sized for the L3, which the threads share: each takes its part
    // (also bounding the threads' B buffers together to the one panel's). The A-sliver order's is
    // sized for a core's own L2. Panels only partition the columns: the same bits.
    SgemmBlocking own = blocking;
    if (own.l1 == SgemmL1::b_sliver) own.nc = std::max(nr, own.nc / parts / nr * nr);
    if (j1 > j0) {
      failure.capture([&] {
        sgemm_rows(own, m, j1 - j0, k, a, SgemmOperand{b.data + j0 * b.col_stride, b.row_stride, b.col_stride},
                   c + j0, ldc, 1, kernels, accumulate, SgemmCausal::none, bias ? bias + j0 : nullptr);
      });
    }
  }
  failure.rethrow();
}

}  // namespace

bool sgemm_splits_columns(const SgemmBlocking& blocking, const SgemmKernels& tile, std::int64_t m, std::int64_t n,
                          SgemmCausal causal, int threads) {
  if (threads < 2 || causal != SgemmCausal::none || m <= 0 || n <= 0) return false;
  if (blocking.split != SgemmSplit::by_shape) return blocking.split == SgemmSplit::columns;
  const std::int64_t column_slivers = (n + tile.nr - 1) / tile.nr, slivers_each = column_slivers / threads;
  if (slivers_each < 1) return false;
  if ((m + threads - 1) / threads < sgemm_few_rows && slivers_each >= 2) return true;
  return slivers_each >= (blocking.l1 == SgemmL1::a_sliver ? 12 : 24);  // (the measurements: sgemm.hpp)
}

void sgemm_blocked(const SgemmBlocking& blocking, std::int64_t m, std::int64_t n, std::int64_t k, SgemmOperand a,
                   SgemmOperand b, float* c, std::int64_t ldc, int max_threads, const CpuKernels& kernels,
                   bool accumulate, SgemmCausal causal, const float* bias) {
  if (blocking.kc != sgemm_kc || blocking.mc < kernels.sgemm.mr || blocking.mc % kernels.sgemm.mr != 0 ||
      blocking.nc < kernels.sgemm.nr || blocking.nc % kernels.sgemm.nr != 0) {  // (no strings built per call)
    fail(ErrorCategory::invalid_argument, "sgemm: blocking ", describe(blocking, kernels.sgemm),
         " is not whole slivers of the tile at depth ", sgemm_kc);
  }
  if (kernels.sgemm.mr > SgemmKernels::max_mr) {  // micro_tail has an entry per row count below mr
    fail(ErrorCategory::invalid_argument, "sgemm: a micro-tile of ", kernels.sgemm.mr, " rows is more than ",
         SgemmKernels::max_mr);
  }
  if (bias && causal != SgemmCausal::none) {
    fail(ErrorCategory::invalid_argument, "sgemm: a bias row needs the whole product (causal mode none)");
  }
  if (m <= 0 || n <= 0 || (k <= 0 && accumulate && !bias)) return;
  if (k <= 0) {  // no product: C (accumulate) or 0, plus the bias
    for (std::int64_t i = 0; i < m; ++i) {
      for (std::int64_t j = 0; j < n; ++j) {
        const float sum = accumulate ? c[i * ldc + j] : 0.0f;
        c[i * ldc + j] = bias ? sum + bias[j] : sum;
      }
    }
    return;
  }
  if (sgemm_splits_columns(blocking, kernels.sgemm, m, n, causal, max_threads)) {
    sgemm_columns(blocking, m, n, k, a, b, c, ldc, max_threads, kernels, accumulate, bias);
  } else {
    sgemm_rows(blocking, m, n, k, a, b, c, ldc, max_threads, kernels, accumulate, causal, bias);
  }
}

}  // namespace loom::kernels::cpu
