// The x86 instruction sets loom's CPU kernels are built for, and the one they run with. The library
// is compiled for the x86-64 baseline; its hot loops (GEMM, GELU, LayerNorm, softmax,
// cross-entropy, AdamW, ...) also exist compiled for AVX2+FMA and AVX-512, and the best one the CPU
// reports is chosen once, at first use. Every variant computes the same bits: the same operations
// in the same order, lane for lane (16-lane reductions reduced in one fixed tree), so a run gives
// identical results whichever variant it used.
#pragma once

#include <string_view>
#include <vector>

namespace loom::kernels {

enum class CpuIsa {
  portable,  // plain C++ for the x86-64 baseline (or any other CPU)
  avx2,      // AVX2 + FMA (x86-64-v3: Haswell, Zen and later)
  avx512,    // AVX-512 F/CD/BW/DQ/VL (x86-64-v4: Skylake-SP, Ice Lake, Sapphire Rapids, Zen 4 and later)
};

std::string_view to_string(CpuIsa isa) noexcept;
// "portable", "avx2" or "avx512"; anything else is an invalid_argument Error.
CpuIsa parse_cpu_isa(std::string_view name);

// Whether this CPU (and its operating system) can run the variant, and this build contains it.
bool cpu_supports(CpuIsa isa) noexcept;
// Every variant cpu_supports(), from portable up.
std::vector<CpuIsa> supported_cpu_isas();

// The variant to run for a requested name: the best supported one when `requested` is empty,
// otherwise that variant (an invalid_argument Error for an unknown name, or for one the CPU cannot
// run, naming what it supports).
CpuIsa select_cpu_isa(std::string_view requested);

// The variant the CPU kernels use in this process: select_cpu_isa(LOOM_CPU_ISA), decided once, on
// first call.
CpuIsa active_cpu_isa();

}  // namespace loom::kernels
