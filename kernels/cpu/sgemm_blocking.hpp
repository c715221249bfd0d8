// The fp32 GEMM's cache blocking, chosen at run time from the CPU's caches (loom/kernels/cpu_caches.hpp)
// and the variant's micro-tile. The loops of sgemm.cpp, outermost first:
//   jc  nc columns of B: the packed B panel (kc x nc), shared by the threads, meant for the L3;
//   pc  kc deep: fixed (sgemm_kc in dispatch.hpp), since it fixes the summation order;
//   ic  mc rows of A: the A block (mc x kc) each thread works through, meant for its L2;
//   jr  one nr-column B sliver (kc x nr), reused by every A sliver of the block: meant for L1;
//   ir  one mr-row A sliver, streamed from L2 through L1.
// Only mc and nc depend on the CPU. Neither changes any sum, so the bits are the same for every
// blocking (tests/unit/kernels/test_cpu_sgemm_blocking.cpp runs the engine with several).
#pragma once

#include <cstdint>
#include <string>

#include "kernels/cpu/dispatch.hpp"
#include "loom/kernels/cpu_caches.hpp"

namespace loom::kernels::cpu {

struct SgemmBlocking {
  std::int64_t mc = 0;  // rows of A per block, a multiple of mr
  std::int64_t nc = 0;  // columns of B per panel, a multiple of nr
  std::int64_t kc = sgemm_kc;
  // Whole slivers of an A with contiguous rows or depth are read where they are instead of packed
  // (SgemmALayout): packing costs a pass over A per B panel, which small GEMMs do not win back.
  bool a_in_place = true;

  bool operator==(const SgemmBlocking&) const = default;
};

// The packed B panel is capped at this many columns (kc x 4096 floats = 6 MiB), so a CPU reporting
// a huge L3 (a VM shows the host's) does not make every process hold a huge buffer.
inline constexpr std::int64_t sgemm_max_nc = 4096;

// The blocking for a micro-tile of mr x nr on these caches. mc: when the B sliver (kc x nr) fits in
// L1 with two ways to spare, the A block takes half of one core's share of L2, at most 256 KiB (the
// classic model: the B sliver stays in L1, the A slivers stream from L2); otherwise the B sliver
// itself streams from L2 and the A block takes an eighth, at most 128 KiB. nc: the B panel takes
// half of the L3 (of the L2 without one), at most sgemm_max_nc. Each is rounded down to whole
// slivers, at least one.
SgemmBlocking choose_sgemm_blocking(std::int64_t mr, std::int64_t nr, const CpuCaches& caches);

// choose_sgemm_blocking for the variant's tile on cpu_caches(), computed once per variant.
const SgemmBlocking& sgemm_blocking(const CpuKernels& kernels);

// "mc 168, nc 4096, kc 384 (tile 6 x 16)".
std::string describe(const SgemmBlocking& blocking, const SgemmKernels& tile);

}  // namespace loom::kernels::cpu
