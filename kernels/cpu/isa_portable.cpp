// The portable variant of the CPU kernel table (dispatch.hpp): the shared kernel bodies over a
// 16-float array, compiled for the build's baseline (x86-64, or any other CPU), and a 6 x 16 GEMM
// micro-kernel of std::fma, which rounds as the FMA instructions do.
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "kernels/cpu/dispatch.hpp"
#include "kernels/cpu/isa_kernels.hpp"
#include "kernels/cpu/simd/vec16_portable.hpp"

namespace loom::kernels::cpu {

namespace portable {

constexpr std::int64_t mr = 6, nr = 16;
static_assert(mr * nr <= sgemm_max_tile, "the macro-kernel's scratch tile must hold a micro-tile");

// MR rows of A (mr, or fewer for micro_tail), read as the layout says (SgemmALayout, dispatch.hpp).
template <SgemmALayout Layout, std::int64_t MR = mr>
void sgemm_micro(std::int64_t kc, const float* a, std::int64_t lda, const float* packed_b, float* c, std::int64_t ldc,
                 bool accumulate, const float* bias) {
  const std::int64_t row_step = Layout == SgemmALayout::rows ? lda : 1;
  const std::int64_t depth_step = Layout == SgemmALayout::packed ? MR : Layout == SgemmALayout::rows ? 1 : lda;
  float acc[MR][nr] = {};
  for (std::int64_t p = 0; p < kc; ++p) {
    const float* b = packed_b + p * nr;
    for (std::int64_t i = 0; i < MR; ++i) {
      const float ai = a[i * row_step + p * depth_step];
      for (std::int64_t j = 0; j < nr; ++j) acc[i][j] = std::fma(ai, b[j], acc[i][j]);
    }
  }
  for (std::int64_t i = 0; i < MR; ++i) {
    for (std::int64_t j = 0; j < nr; ++j) {
      const float sum = accumulate ? c[i * ldc + j] + acc[i][j] : acc[i][j];
      c[i * ldc + j] = bias ? sum + bias[j] : sum;
    }
  }
}

}  // namespace portable

namespace portable {

constexpr SgemmKernels sgemm_kernels() {
  SgemmKernels g{mr, nr, sgemm_micro<SgemmALayout::packed>, sgemm_micro<SgemmALayout::rows>,
                 sgemm_micro<SgemmALayout::columns>, isa::pack_a<Vec16, mr>, isa::pack_b<Vec16, nr>};
  isa::fill_sgemm_tails<Vec16, mr>(g, []<int rows>() { return &sgemm_micro<SgemmALayout::columns, rows>; });
  return g;
}

}  // namespace portable

// constinit: built at compile time, so no constructor is compiled for this target.
constinit const CpuKernels portable_kernels = isa::make_table<portable::Vec16>(CpuIsa::portable, portable::sgemm_kernels());

}  // namespace loom::kernels::cpu
