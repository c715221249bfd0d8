// The fp32 GEMM's cache blocking, chosen at run time from the CPU's caches (loom/kernels/cpu_caches.hpp)
// and the variant's micro-tile. The loops of sgemm.cpp, outermost first:
//   jc  nc columns of B: the packed B panel (kc x nc), shared by the threads (or one per thread when
//       they split C's columns: sgemm_splits_columns in sgemm.hpp);
//   pc  kc deep: fixed (sgemm_kc in dispatch.hpp), since it fixes the summation order;
//   ic  up to mc rows of A: the A block (mc x kc at most) each thread works through (sgemm_row_blocks
//       in sgemm.hpp: even blocks of whole slivers in the B-sliver order);
//   then the slivers of the block and of the panel, in one of two orders (SgemmL1): the sliver that
//   fits stays in L1 while the other kind streams past it.
// Only mc, nc, the order and whether A is packed depend on the CPU (and, through the wide form, on
// n). None changes any sum, so the bits are the same for every blocking
// (tests/unit/kernels/test_cpu_sgemm_blocking.cpp runs the engine with several).
#pragma once

#include <cstdint>
#include <string>

#include "kernels/cpu/dispatch.hpp"
#include "loom/kernels/cpu_caches.hpp"

namespace loom::kernels::cpu {

// Which sliver stays in L1 while the slivers of the other operand stream past it:
//   b_sliver  jr outer, ir inner: the B sliver (kc x nr) in L1, the A block (mc x kc) in L2 and the
//             B panel in L3 (the Goto/BLIS order);
//   a_sliver  ir outer, jr inner: the A sliver (mr x kc) in L1 and the B panel (kc x nc) in L2, for a
//             B sliver too big for L1 (AVX-512's 32 x 384 floats are 48 KiB).
enum class SgemmL1 { b_sliver, a_sliver };

// How a GEMM's threads share C (sgemm_splits_columns):
//   by_shape  the split that measured faster for the GEMM's shape and order;
//   rows      each thread an even share of C's rows, all threads on one packed B panel at a time;
//   columns   each thread an even share of C's column slivers, with its own B panels and all of A.
// Every element of C is the same sum either way: the split moves work between threads, not terms.
enum class SgemmSplit { by_shape, rows, columns };

struct SgemmBlocking {
  std::int64_t mc = 0;  // the most rows of A per block, a multiple of mr
  std::int64_t nc = 0;  // columns of B per panel, a multiple of nr
  std::int64_t kc = sgemm_kc;
  // Whole slivers of an A with contiguous rows or depth are read where they are instead of packed
  // (SgemmALayout), saving a pass over A per B panel; a transposed A is still packed where
  // sgemm_packs_columns says. choose_sgemm_blocking's B-sliver blockings (AVX2's), wide form included,
  // pack every A; its A-sliver blockings (AVX-512's) read it in place.
  bool a_in_place = true;
  SgemmL1 l1 = SgemmL1::b_sliver;
  // The B-sliver order's GEMMs wider than wide_n columns run in the A-sliver order instead, with a
  // panel of wide_nc columns (0: wide_n) and a block of wide_mc rows (wide_n 0: never; see
  // choose_sgemm_blocking).
  std::int64_t wide_n = 0;
  std::int64_t wide_nc = 0;
  std::int64_t wide_mc = 0;
  // The threads' split (chosen per GEMM unless set; the engine's tests set it to run both).
  SgemmSplit split = SgemmSplit::by_shape;

  // The blocking a GEMM of n columns runs with: this one, or its A-sliver form past wide_n.
  SgemmBlocking for_columns(std::int64_t n) const;

  bool operator==(const SgemmBlocking&) const = default;
};

// The packed B panel is capped at this many columns (kc x 4096 floats = 6 MiB), so a CPU reporting
// a huge L3 (a VM shows the host's) does not make every process hold a huge buffer.
inline constexpr std::int64_t sgemm_max_nc = 4096;

// The blocking for a micro-tile of mr x nr on these caches. When the B sliver (kc x nr) fits in L1
// with two ways to spare, it stays there (SgemmL1::b_sliver): the A block, packed, takes half of one
// core's share of L2, at most 256 KiB, and the B panel half of the L3 (of the L2 without one).
// Otherwise the A sliver stays in L1 (SgemmL1::a_sliver), read in place: the B panel takes half of
// the L2 share and the A block an eighth, at most 128 KiB. nc is at most sgemm_max_nc; each is
// rounded down to whole slivers, at least one. In the B-sliver order on a core with an L2 share of
// 2 MiB or more, GEMMs wider than the A-sliver order's panel (wide_n) take that order with a panel of
// five eighths of the L2 share (wide_nc) and its block (wide_mc): measured faster there for the wide
// GEMMs only (docs/ARCHITECTURE.md, "CPU GEMM blocking").
SgemmBlocking choose_sgemm_blocking(std::int64_t mr, std::int64_t nr, const CpuCaches& caches);

// choose_sgemm_blocking for the variant's tile on cpu_caches(), computed once per variant.
const SgemmBlocking& sgemm_blocking(const CpuKernels& kernels);

// "mc 168, nc 4096, kc 384, B sliver in L1, A packed (tile 6 x 16)" (", A packed" unless a_in_place),
// and where it applies "; past 672 columns: mc 84, nc 848, A sliver in L1" (packed or not as the
// blocking); a split named by the blocking adds "; threads split the columns" (or rows).
std::string describe(const SgemmBlocking& blocking, const SgemmKernels& tile);
// "b_sliver" or "a_sliver".
const char* to_string(SgemmL1 l1);
// "by_shape", "rows" or "columns".
const char* to_string(SgemmSplit split);

}  // namespace loom::kernels::cpu
