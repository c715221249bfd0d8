// The run-time cache blocking of the fp32 GEMM (sgemm_blocking.hpp).
#include "kernels/cpu/sgemm_blocking.hpp"

#include <algorithm>
#include <mutex>

namespace loom::kernels::cpu {

namespace {

// How many units of bytes_per_unit fit in bytes: at least one.
std::int64_t whole(std::int64_t bytes, std::int64_t bytes_per_unit) {
  return std::max<std::int64_t>(1, bytes / bytes_per_unit);
}

}  // namespace

SgemmBlocking SgemmBlocking::for_columns(std::int64_t n) const {
  if (wide_n <= 0 || n <= wide_n) return *this;
  SgemmBlocking wide = *this;
  wide.l1 = SgemmL1::a_sliver;
  wide.mc = wide_mc;
  wide.nc = wide_nc > 0 ? wide_nc : wide_n;
  wide.wide_n = wide.wide_nc = wide.wide_mc = 0;
  return wide;
}

SgemmBlocking choose_sgemm_blocking(std::int64_t mr, std::int64_t nr, const CpuCaches& caches) {
  SgemmBlocking blocking;
  const std::int64_t depth_bytes = blocking.kc * static_cast<std::int64_t>(sizeof(float));
  // Hyper-threads on one core share its L2; the count CPUID gives is an upper bound, so at most 2.
  const std::int64_t l2_share = caches.l2.bytes / std::clamp(caches.l2.shared_by, 1, 2);
  const std::int64_t max_slivers = sgemm_max_nc / nr;
  // The A-sliver order's block and panel: each core reads the whole panel for every A sliver, so it
  // takes half of the L2 share, the rest for C and A.
  const std::int64_t a_order_mc = whole(std::min<std::int64_t>(l2_share / 8, 128 << 10), depth_bytes * mr) * mr;
  const std::int64_t a_order_nc = std::min(whole(l2_share / 2, depth_bytes * nr), max_slivers) * nr;
  // The classic order keeps the B sliver in L1 when it leaves two ways for the A slivers streaming
  // past it (ways unknown: 8): it streams the fewer bytes per tile (mr against nr floats a depth).
  // Past 168 rows of AVX2 tiles (256 KiB) a B sliver is already reused 28 times, and larger blocks
  // measured slower (more C rows and pages in flight). A B sliver that does not fit (AVX-512's) was
  // re-read from L2 for every A sliver; keeping the A sliver in L1 instead, with the panel sized for
  // the L2, measured 3-7% faster (docs/ARCHITECTURE.md, "CPU GEMM blocking").
  const std::int64_t l1_ways = caches.l1d.ways > 0 ? caches.l1d.ways : 8;
  const bool b_sliver_fits = l1_ways > 2 && depth_bytes * nr <= caches.l1d.bytes / l1_ways * (l1_ways - 2);
  if (b_sliver_fits) {
    blocking.l1 = SgemmL1::b_sliver;
    // Its A is packed, at every width (the wide form's too): AVX2's micro-kernel, 2 depths an
    // iteration, broadcasts a packed sliver's 6 rows from one stream instead of 6 rows in place. On a
    // Xeon VM reporting family 6 model 167 the six GEMMs of issue 35 took 0.94-0.97x the time at 1
    // thread and 0.92-0.96x at 2, and with Zen 3's blocking 0.91-0.97x; the width-128 GPT step
    // (attention's heads still in place) 0.973x and 0.983x, with Zen 3's blocking 0.905x and 0.921x
    // (benchmarks/results/cpu-gemm-packed-a-xeon-m167-2c-2026-12-07/). AVX-512's A-sliver order
    // keeps A in place: packed, its GEMMs went either way (0.95-1.05x the time).
    blocking.a_in_place = false;
    blocking.mc = whole(std::min<std::int64_t>(l2_share / 2, 256 << 10), depth_bytes * mr) * mr;
    // The B panel is shared by the threads: half of the L3, or of the L2 on a CPU without one.
    const std::int64_t panel_bytes = (caches.l3.bytes > 0 ? caches.l3.bytes : caches.l2.bytes) / 2;
    blocking.nc = std::min(whole(panel_bytes, depth_bytes * nr), max_slivers) * nr;
    // On the Xeon's 2 MiB private L2, AVX2 GEMMs wider than the A-sliver order's 672-column panel ran
    // 3-5% faster at 1 thread in that order and 0-12% at 2 (8 rounds), while the 1-thread GPT
    // step, whose GEMMs are at most 512 wide, measured 2% slower in it. Smaller L2s (Zen 3 and 4)
    // were not measured in that order, so they keep the B-sliver order throughout.
    // Its panel is five eighths of the L2 share (848 columns there) rather than the half that AVX-512's
    // A-sliver order takes: the wide form packs A (above) a sliver at a time for each panel, and a
    // wider panel packs each sliver for more B slivers; n = 768 also runs as one panel, not two of
    // 384. Against 672 columns, interleaved in one process, the six GEMMs of issue 35 ran 0.96-1.01x
    // the time (2048^3 0.98-1.00x and 1024x768x3072 0.96-0.98x; 1024x3072x768, 4 panels of 768 not 5
    // of 624, up to 1.3% slower); panels of 1024 ran 2048^3 and 1024x3072x768 slower.
    if (l2_share >= (2 << 20)) {
      blocking.wide_n = a_order_nc;
      blocking.wide_nc = std::min(whole(l2_share / 8 * 5, depth_bytes * nr), max_slivers) * nr;
      blocking.wide_mc = a_order_mc;
    }
  } else {
    blocking.l1 = SgemmL1::a_sliver;
    blocking.mc = a_order_mc;
    blocking.nc = a_order_nc;
  }
  return blocking;
}

const SgemmBlocking& sgemm_blocking(const CpuKernels& kernels) {
  static SgemmBlocking chosen[3];
  static std::once_flag once[3];
  const auto index = static_cast<std::size_t>(kernels.isa);
  std::call_once(once[index],
                 [&] { chosen[index] = choose_sgemm_blocking(kernels.sgemm.mr, kernels.sgemm.nr, cpu_caches()); });
  return chosen[index];
}

const char* to_string(SgemmL1 l1) { return l1 == SgemmL1::a_sliver ? "a_sliver" : "b_sliver"; }

const char* to_string(SgemmSplit split) {
  return split == SgemmSplit::rows ? "rows" : split == SgemmSplit::columns ? "columns" : "by_shape";
}

std::string describe(const SgemmBlocking& blocking, const SgemmKernels& tile) {
  std::string text = "mc " + std::to_string(blocking.mc) + ", nc " + std::to_string(blocking.nc) + ", kc " +
                     std::to_string(blocking.kc) + (blocking.l1 == SgemmL1::a_sliver ? ", A sliver" : ", B sliver") +
                     " in L1" + (blocking.a_in_place ? "" : ", A packed") + " (tile " + std::to_string(tile.mr) +
                     " x " + std::to_string(tile.nr) + ")";
  if (blocking.wide_n > 0) {
    text += "; past " + std::to_string(blocking.wide_n) + " columns: mc " + std::to_string(blocking.wide_mc) +
            ", nc " + std::to_string(blocking.wide_nc) + ", A sliver in L1";
  }
  if (blocking.split != SgemmSplit::by_shape) text += "; threads split the " + std::string(to_string(blocking.split));
  return text;
}

}  // namespace loom::kernels::cpu
