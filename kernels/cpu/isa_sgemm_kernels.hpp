// The GEMM's packing and micro-kernel bodies for the CPU kernel table (dispatch.hpp: SgemmKernels),
// written once over a 16-lane V and a variant's register type R. Included by isa_kernels.hpp, so
// inside each variant's target region under the same rules (see there): every template takes V
// first, so each variant's copies have names of their own. The engine that drives them is
// sgemm.cpp; the cache blocking, sgemm_blocking.cpp.
#pragma once

#include "kernels/cpu/dispatch.hpp"

namespace loom::kernels::cpu::isa {

// The GEMM engine's packing (see SgemmKernels): reads run along the operand's contiguous direction;
// where that is across the packed layout, V::transpose_rows transposes in registers.
// R: the register type of the variant's micro-kernel (R::lanes >= MR), or void.
template <class V, std::int64_t MR, class R = void>
void pack_a(std::int64_t rows, std::int64_t kc, const float* a, std::int64_t rs, std::int64_t cs, float* dst) {
  if (rs == 1 && MR <= 16) {
    // m contiguous (a transposed A): each depth p is one contiguous run over all the block's rows,
    // copied into every sliver in turn. Whole-register stores (lanes past the sliver's rows hold the
    // next sliver's or zeros) run into the rows of the next `reach` depths, which are written after;
    // the last depths store only their rows. A sliver with a whole register of rows ahead of it in
    // the block is copied with one plain load and store of R per depth (AVX2: one ymm for 6 rows,
    // where a 16-lane masked copy takes two of each), the others through masked 16-lane copies.
    constexpr std::int64_t reach = (16 - MR + MR - 1) / MR;
    constexpr std::int64_t lanes = [] {
      if constexpr (std::is_void_v<R>) return std::int64_t{0};
      else return static_cast<std::int64_t>(R::lanes >= MR ? R::lanes : 0);
    }();
    constexpr std::int64_t reach_r = lanes > 0 ? (lanes - MR + MR - 1) / MR : 0;
    for (std::int64_t p = 0; p < kc; ++p) {
      const float* src = a + p * cs;
      std::int64_t i0 = 0;
      if constexpr (lanes > 0) {
        if (p + reach_r < kc) {
          for (; i0 + lanes <= rows; i0 += MR) R::storeu(dst + i0 * kc + p * MR, R::loadu(src + i0));
        }
      }
      for (; i0 < rows; i0 += MR) {
        const int live = static_cast<int>(rows - i0 < MR ? rows - i0 : MR);
        const V v = V::load_partial(src + i0, live);
        float* out = dst + i0 * kc + p * MR;
        if (p + reach < kc) v.store(out);
        else v.store_partial(out, static_cast<int>(MR));
      }
    }
    return;
  }
  for (std::int64_t i0 = 0; i0 < rows; i0 += MR, dst += MR * kc) {
    const std::int64_t live = rows - i0 < MR ? rows - i0 : MR;
    if (cs == 1) {
      V::template transpose_rows<MR>(live, kc, a + i0 * rs, rs, dst);
      continue;
    }
    for (std::int64_t p = 0; p < kc; ++p) {
      for (std::int64_t r = 0; r < MR; ++r) dst[p * MR + r] = r < live ? a[(i0 + r) * rs + p * cs] : 0.0f;
    }
  }
}

template <class V, std::int64_t NR>
void pack_b(std::int64_t kc, std::int64_t cols, const float* b, std::int64_t rs, std::int64_t cs, float* dst) {
  static_assert(NR % 16 == 0, "B slivers are copied in whole Vec16s");
  const std::int64_t slivers = (cols + NR - 1) / NR;
  if (rs == 1 && cs != 1) {
    for (std::int64_t s = 0; s < slivers; ++s) {
      const std::int64_t live = cols - s * NR < NR ? cols - s * NR : NR;
      V::template transpose_rows<NR>(live, kc, b + s * NR * cs, cs, dst + s * NR * kc);
    }
    return;
  }
  if (cs == 1) {
    // Along B's rows: each depth is one contiguous read across all the slivers. Walking down one
    // sliver at a time reads one line per row, a row apart, and waits on a cache (and TLB) miss each.
    const std::int64_t full = cols / NR, rest = cols % NR;
    for (std::int64_t p = 0; p < kc; ++p) {
      const float* src = b + p * rs;
      float* out = dst + p * NR;
      for (std::int64_t s = 0; s < full; ++s) {
        for (std::int64_t j = 0; j < NR; j += 16) V::load(src + s * NR + j).store(out + s * NR * kc + j);
      }
      if (rest > 0) {
        for (std::int64_t j = 0; j < NR; j += 16) {
          const std::int64_t live = rest - j < 0 ? 0 : rest - j < 16 ? rest - j : 16;
          V::load_partial(src + full * NR + j, static_cast<int>(live)).store(out + full * NR * kc + j);
        }
      }
    }
    return;
  }
  for (std::int64_t s = 0; s < slivers; ++s, dst += NR * kc) {
    const std::int64_t live = cols - s * NR < NR ? cols - s * NR : NR;
    for (std::int64_t p = 0; p < kc; ++p) {
      for (std::int64_t j = 0; j < NR; ++j) dst[p * NR + j] = j < live ? b[p * rs + (s * NR + j) * cs] : 0.0f;
    }
  }
}

// The GEMM micro-kernel over a register type R (one ymm or zmm: R::lanes floats, R::zero, load,
// broadcast, fma, add, store): an MR x (NV R::lanes) block of C in NV MR accumulators, one broadcast
// of A and NV loads of B per k, each element summed over k in order with fused multiply-adds. B is a
// packed sliver; A is read as the layout says (SgemmALayout, dispatch.hpp), with `lda` the stride of
// the direction that is not contiguous.
template <class V, class R, int MR, int NV, int Unroll, SgemmALayout Layout>
void sgemm_micro(std::int64_t kc, const float* a, std::int64_t lda, const float* packed_b, float* c,
                 std::int64_t ldc, bool accumulate, const float* bias) {
  constexpr int lanes = R::lanes, nr = NV * R::lanes;
  typename R::reg acc[MR][NV];
#pragma GCC unroll 32
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[i][v] = R::zero();
    // Bring C towards L1 while the k loop runs; it is only touched at the end.
    R::prefetch(c + i * ldc);
    R::prefetch(c + i * ldc + nr - 1);
  }
  // Rows of A in place are reached from one base per 3 rows, base + {0, 1, 2} lda, when there are
  // more than 8: 14 row pointers would not fit in the general registers and spill into the k loop.
  constexpr int rows_per_base = Layout == SgemmALayout::rows && MR > 8 ? 3 : MR;
  constexpr int groups = (MR + rows_per_base - 1) / rows_per_base;
  const float* base[groups];
#pragma GCC unroll 8
  for (int g = 0; g < groups; ++g) base[g] = a + rows_per_base * g * (Layout == SgemmALayout::rows ? lda : 0);
  const float* pb = packed_b;
  // Depth k + u: NV loads of B and one broadcast of A per row.
  const auto step = [&](int u) __attribute__((always_inline)) {
    typename R::reg b[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) b[v] = R::load(pb + u * nr + v * lanes);
#pragma GCC unroll 32
    for (int i = 0; i < MR; ++i) {
      const float* p = Layout == SgemmALayout::rows     ? base[i / rows_per_base] + (i % rows_per_base) * lda + u
                       : Layout == SgemmALayout::packed ? base[0] + u * MR + i
                                                        : base[0] + u * lda + i;
      const typename R::reg ai = R::broadcast(p);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] = R::fma(ai, b[v], acc[i][v]);
    }
  };
  const std::int64_t depth_step = Layout == SgemmALayout::packed ? MR : Layout == SgemmALayout::rows ? 1 : lda;
  // Unroll depths per iteration: the loop's own scalar work competes with the FMAs for their ports
  // (AVX-512's step measured 2% faster at 4, AVX2's 2% slower at 4 and faster at 2: isa_avx2.cpp).
  std::int64_t k = 0;
  for (; k + Unroll <= kc; k += Unroll) {
#pragma GCC unroll 4
    for (int u = 0; u < Unroll; ++u) {
      R::prefetch(pb + (8 + u) * nr);
      step(u);
    }
#pragma GCC unroll 8
    for (int g = 0; g < groups; ++g) base[g] += Unroll * depth_step;
    pb += Unroll * nr;
  }
  for (; k < kc; ++k) {
    step(0);
#pragma GCC unroll 8
    for (int g = 0; g < groups; ++g) base[g] += depth_step;
    pb += nr;
  }
  if (accumulate) {
#pragma GCC unroll 32
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] = R::add(R::loadu(c + i * ldc + v * lanes), acc[i][v]);
    }
  }
  if (bias) {  // (a GEMM's bias row, on its last pass: the epilogue's addition, done here in registers)
    typename R::reg row[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) row[v] = R::loadu(bias + v * lanes);
#pragma GCC unroll 32
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] = R::add(acc[i][v], row[v]);
    }
  }
#pragma GCC unroll 32
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) R::storeu(c + i * ldc + v * lanes, acc[i][v]);
  }
}

// g.micro_tail[r] = make.template operator()<r>() for 1 <= r < MR: a variant's tail micro-kernels
// (at compile time; <utility> is included by the variant's file before its target region).
template <class V, int MR, class Make>
constexpr void fill_sgemm_tails(SgemmKernels& g, Make make) {
  static_assert(MR <= SgemmKernels::max_mr, "micro_tail has an entry per row count below mr");
  [&]<int... r>(std::integer_sequence<int, r...>) {
    ((g.micro_tail[r + 1] = make.template operator()<r + 1>()), ...);
  }(std::make_integer_sequence<int, MR - 1>{});
}

// The GEMM kernels of a variant whose micro-kernel is sgemm_micro over R: one per layout of A, the
// tails, and the packing. UnrollColumns is the unroll of the kernels that read A's columns (a
// transposed A in place, and the tails, which read a packed sliver's rows as columns), Unroll that
// of the others.
template <class V, class R, int MR, int NV, int Unroll, int UnrollColumns = Unroll>
constexpr SgemmKernels sgemm_kernels() {
  constexpr std::int64_t nr = NV * R::lanes;
  static_assert(MR * nr <= sgemm_max_tile, "the macro-kernel's scratch tile must hold a micro-tile");
  SgemmKernels g{MR, nr, sgemm_micro<V, R, MR, NV, Unroll, SgemmALayout::packed>,
                 sgemm_micro<V, R, MR, NV, Unroll, SgemmALayout::rows>,
                 sgemm_micro<V, R, MR, NV, UnrollColumns, SgemmALayout::columns>, pack_a<V, MR, R>, pack_b<V, nr>};
  fill_sgemm_tails<V, MR>(g, []<int rows>() { return &sgemm_micro<V, R, rows, NV, UnrollColumns, SgemmALayout::columns>; });
  return g;
}

}  // namespace loom::kernels::cpu::isa
