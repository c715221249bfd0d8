// The CPU's data caches, as far as the GEMM's cache blocking needs them (kernels/cpu/sgemm_blocking.hpp):
// the size and associativity of one L1d, L2 and L3, and how many logical CPUs share each. Read from
// CPUID (leaf 4 on Intel, leaf 0x8000001D on AMD), else from Linux's sysfs, else assumed; then
// LOOM_CPU_CACHES, when set, replaces what it names, e.g. LOOM_CPU_CACHES=l1d=32K/8,l2=512K/8,l3=32M
// (this is how the blocking another CPU would get can be run and tested here).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace loom::kernels {

struct CpuCache {
  std::int64_t bytes = 0;  // one instance; 0 when the CPU has no such cache
  int ways = 0;            // associativity; 0 when unknown
  int shared_by = 1;       // logical CPUs sharing one instance

  bool operator==(const CpuCache&) const = default;
};

struct CpuCaches {
  CpuCache l1d, l2, l3;
  std::string source;  // "cpuid", "sysfs", "assumed", with " + LOOM_CPU_CACHES" when overridden
};

// What the hardware reports (CPUID, then sysfs, then 32 KiB / 512 KiB / 8 MiB as a last resort).
CpuCaches detect_cpu_caches();

// `base` with the caches named in `spec` replaced: comma-separated LEVEL=SIZE[/WAYS[/SHARED_BY]],
// LEVEL one of l1d, l2, l3, SIZE in bytes with an optional K, M, G or T (KiB, MiB, ...), e.g.
// "l1d=32K/8,l2=512K". A level given without WAYS keeps base's associativity; without SHARED_BY it
// is shared by no other CPU (1). An invalid_argument Error names what is wrong (unknown level, bad
// size, an L1d or L2 of 0, ways out of 1..64, sharing out of 1..4096, a fourth field).
CpuCaches parse_cpu_caches(std::string_view spec, CpuCaches base);

// detect_cpu_caches() with LOOM_CPU_CACHES applied, read once (an invalid_argument Error naming
// the variable when it does not parse).
const CpuCaches& cpu_caches();

// "L1d 48 KiB 12-way, L2 2 MiB 16-way, L3 300 MiB 15-way shared by 2 (cpuid)".
std::string describe(const CpuCaches& caches);

}  // namespace loom::kernels
