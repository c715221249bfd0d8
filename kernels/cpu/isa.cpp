// Which CPU kernel variant runs: what the CPU reports (CPUID, and XGETBV for the operating system's
// support of the AVX and AVX-512 registers, both read by __builtin_cpu_supports), LOOM_CPU_ISA, and
// the table lookup of dispatch.hpp.
#include <cstdlib>
#include <string>

#include "kernels/cpu/dispatch.hpp"
#include "loom/core/error.hpp"
#include "loom/kernels/cpu_isa.hpp"

namespace loom::kernels {

std::string_view to_string(CpuIsa isa) noexcept {
  switch (isa) {
    case CpuIsa::portable: return "portable";
    case CpuIsa::avx2: return "avx2";
    case CpuIsa::avx512: return "avx512";
  }
  return "unknown";
}

CpuIsa parse_cpu_isa(std::string_view name) {
  for (CpuIsa isa : {CpuIsa::portable, CpuIsa::avx2, CpuIsa::avx512}) {
    if (name == to_string(isa)) return isa;
  }
  fail(ErrorCategory::invalid_argument, "unknown CPU instruction set '", name, "'; use portable, avx2 or avx512");
}

bool cpu_supports(CpuIsa isa) noexcept {
#if defined(__x86_64__)
  switch (isa) {
    case CpuIsa::portable: return true;
    case CpuIsa::avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c") &&
             __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("lzcnt") &&
             __builtin_cpu_supports("popcnt");
    case CpuIsa::avx512:
      return cpu_supports(CpuIsa::avx2) && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512vl");
  }
  return false;
#else
  return isa == CpuIsa::portable;
#endif
}

std::vector<CpuIsa> supported_cpu_isas() {
  std::vector<CpuIsa> out;
  for (CpuIsa isa : {CpuIsa::portable, CpuIsa::avx2, CpuIsa::avx512}) {
    if (cpu_supports(isa)) out.push_back(isa);
  }
  return out;
}

namespace {

std::string supported_names() {
  std::string names;
  for (CpuIsa isa : supported_cpu_isas()) {
    if (!names.empty()) names += ", ";
    names += to_string(isa);
  }
  return names;
}

}  // namespace

CpuIsa select_cpu_isa(std::string_view requested) {
  if (requested.empty()) return supported_cpu_isas().back();
  const CpuIsa isa = parse_cpu_isa(requested);
  require(cpu_supports(isa), "the ", requested, " CPU kernels cannot run here: this CPU supports only ",
          supported_names());
  return isa;
}

CpuIsa active_cpu_isa() {
  static const CpuIsa active = [] {
    const char* requested = std::getenv("LOOM_CPU_ISA");
    try {
      return select_cpu_isa(requested ? requested : "");
    } catch (const Error& error) {
      fail(ErrorCategory::invalid_argument, "LOOM_CPU_ISA=", requested, ": ", error.detail());
    }
  }();
  return active;
}

namespace cpu {

const CpuKernels& cpu_kernels(CpuIsa isa) {
  require(cpu_supports(isa), "the ", to_string(isa), " CPU kernels cannot run here: this CPU supports only ",
          supported_names());
  switch (isa) {
#if defined(__x86_64__)
    case CpuIsa::avx512: return avx512_kernels;
    case CpuIsa::avx2: return avx2_kernels;
#endif
    default: return portable_kernels;
  }
}

const CpuKernels& cpu_kernels() {
  static const CpuKernels& active = cpu_kernels(active_cpu_isa());
  return active;
}

}  // namespace cpu

}  // namespace loom::kernels
