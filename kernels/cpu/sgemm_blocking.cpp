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

SgemmBlocking choose_sgemm_blocking(std::int64_t mr, std::int64_t nr, const CpuCaches& caches) {
  SgemmBlocking blocking;
  const std::int64_t depth_bytes = blocking.kc * static_cast<std::int64_t>(sizeof(float));
  // Hyper-threads on one core share its L2; the count CPUID gives is an upper bound, so at most 2.
  const std::int64_t l2_share = caches.l2.bytes / std::clamp(caches.l2.shared_by, 1, 2);
  // The B sliver stays in L1 when it leaves two ways for the A slivers streaming past it (ways
  // unknown: 8). Then the A block can take half of the L2. A sliver that does not fit (AVX-512's
  // 384 x 32 floats are 48 KiB) is re-read from L2 for every A sliver: an eighth. Past 168 rows of
  // AVX2 tiles (256 KiB) a B sliver is already reused 28 times, and larger blocks measured slower
  // (more C rows and pages in flight): hence the caps (docs/ARCHITECTURE.md, "CPU GEMM blocking").
  const std::int64_t l1_ways = caches.l1d.ways > 0 ? caches.l1d.ways : 8;
  const bool b_sliver_in_l1 = l1_ways > 2 && depth_bytes * nr <= caches.l1d.bytes / l1_ways * (l1_ways - 2);
  const std::int64_t a_block_bytes = b_sliver_in_l1 ? std::min<std::int64_t>(l2_share / 2, 256 << 10)
                                                    : std::min<std::int64_t>(l2_share / 8, 128 << 10);
  blocking.mc = whole(a_block_bytes, depth_bytes * mr) * mr;
  // The B panel is shared by the threads: half of the L3, or of the L2 on a CPU without one.
  const std::int64_t panel_bytes = (caches.l3.bytes > 0 ? caches.l3.bytes : caches.l2.bytes) / 2;
  blocking.nc = std::min(whole(panel_bytes, depth_bytes * nr), sgemm_max_nc / nr) * nr;
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

std::string describe(const SgemmBlocking& blocking, const SgemmKernels& tile) {
  return "mc " + std::to_string(blocking.mc) + ", nc " + std::to_string(blocking.nc) + ", kc " +
         std::to_string(blocking.kc) + " (tile " + std::to_string(tile.mr) + " x " + std::to_string(tile.nr) + ")";
}

}  // namespace loom::kernels::cpu
