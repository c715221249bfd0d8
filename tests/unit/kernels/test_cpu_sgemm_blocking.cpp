// The fp32 GEMM's run-time cache blocking (kernels/cpu/sgemm_blocking.cpp): the blocking worked out
// by hand for the caches of real CPUs, its limits on odd ones, and the engine's bits, which must not
// depend on the blocking, on how A is read (packed or in place), on the variant or on the threads.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/sgemm.hpp"
#include "loom/core/error.hpp"

using loom::kernels::CpuCaches;
using loom::kernels::CpuIsa;
using loom::kernels::supported_cpu_isas;
using loom::kernels::cpu::choose_sgemm_blocking;
using loom::kernels::cpu::cpu_kernels;
using loom::kernels::cpu::SgemmBlocking;
using loom::kernels::cpu::SgemmCausal;
using loom::kernels::cpu::SgemmL1;
using loom::kernels::cpu::SgemmOperand;
using loom::kernels::cpu::SgemmSplit;

namespace {

// L1d, L2, L3 as CPUID reports them.
const CpuCaches zen3{{32 << 10, 8, 1}, {512 << 10, 8, 1}, {32 << 20, 16, 16}, "AMD Zen 3"};
const CpuCaches zen4{{32 << 10, 8, 1}, {1 << 20, 8, 1}, {32 << 20, 16, 16}, "AMD Zen 4"};
const CpuCaches sapphire_rapids{{48 << 10, 12, 2}, {2 << 20, 16, 2}, {300 << 20, 20, 2}, "Xeon VM"};

SgemmBlocking blocking(std::int64_t mc, std::int64_t nc, bool a_in_place, SgemmL1 l1 = SgemmL1::b_sliver) {
  SgemmBlocking b;
  b.mc = mc;
  b.nc = nc;
  b.a_in_place = a_in_place;
  b.l1 = l1;
  return b;
}

constexpr SgemmL1 a_sliver = SgemmL1::a_sliver;

}  // namespace

TEST_CASE("the GEMM blocking follows the caches: worked out by hand for three CPUs", "[gemm][sgemm][blocking]") {
  // kc = 384: a depth row of a sliver is 1536 bytes.
  // Zen 3, AVX2 6 x 16: the B sliver (24 KiB) fits 6 of the 8 ways of 32 KiB and stays in L1; the A
  // block takes half of 512 KiB (within the 256 KiB cap): 262144 / (1536 x 6) = 28 slivers = 168
  // rows. The B panel: half of 32 MiB is past the cap, 4096 columns. In this order A is packed.
  REQUIRE(choose_sgemm_blocking(6, 16, zen3) == blocking(168, 4096, false));
  // Zen 4: AVX2 half of 1 MiB, capped at 256 KiB: 168 rows again. AVX-512 14 x 32: the B sliver
  // (48 KiB) does not fit, so the A sliver stays in L1, the B panel takes half of the L2,
  // 524288 / (1536 x 32) = 10 slivers = 320 columns, and the A block an eighth (the 128 KiB cap):
  // 131072 / (1536 x 14) = 6 slivers = 84 rows. A is packed in the B-sliver order (AVX2's) and read
  // in place in the A-sliver order (AVX-512's).
  REQUIRE(choose_sgemm_blocking(6, 16, zen4) == blocking(168, 4096, false));
  REQUIRE(choose_sgemm_blocking(14, 32, zen4) == blocking(84, 320, true, a_sliver));
  // The Xeon VM, L2 shared by 2 hyper-threads (1 MiB each): AVX2's B sliver fits 10 of 12 ways of
  // 48 KiB: 168 rows; AVX-512 as on Zen 4.
  REQUIRE(choose_sgemm_blocking(6, 16, sapphire_rapids) == blocking(168, 4096, false));
  REQUIRE(choose_sgemm_blocking(14, 32, sapphire_rapids) == blocking(84, 320, true, a_sliver));
  // The same 2 MiB L2 for one core (the 2-core Xeon the rule was measured on): twice the AVX-512
  // panel, 1048576 / 49152 = 21 slivers = 672 columns.
  CpuCaches private_l2 = sapphire_rapids;
  private_l2.l2.shared_by = 1;
  REQUIRE(choose_sgemm_blocking(14, 32, private_l2) == blocking(84, 672, true, a_sliver));
  // AVX2 there: the B-sliver order, except for GEMMs wider than the A-sliver order's panel
  // (1048576 / 24576 = 42 slivers = 672 columns), which run in that order with a panel of five
  // eighths of the L2 (1310720 / 24576 = 53 slivers = 848 columns) and its block (131072 / 9216 =
  // 14 slivers = 84 rows), packing A as the B-sliver order does.
  SgemmBlocking xeon_avx2 = blocking(168, 4096, false);
  xeon_avx2.wide_n = 672;
  xeon_avx2.wide_nc = 848;
  xeon_avx2.wide_mc = 84;
  REQUIRE(choose_sgemm_blocking(6, 16, private_l2) == xeon_avx2);
  REQUIRE(xeon_avx2.for_columns(1) == xeon_avx2);
  REQUIRE(xeon_avx2.for_columns(672) == xeon_avx2);
  REQUIRE(xeon_avx2.for_columns(673) == blocking(84, 848, false, a_sliver));
  // A blocking made by hand without wide_nc keeps panels of wide_n.
  SgemmBlocking no_wide_nc = xeon_avx2;
  no_wide_nc.wide_nc = 0;
  REQUIRE(no_wide_nc.for_columns(673) == blocking(84, 672, false, a_sliver));
  REQUIRE(loom::kernels::cpu::describe(xeon_avx2, cpu_kernels(CpuIsa::portable).sgemm) ==
          "mc 168, nc 4096, kc 384, B sliver in L1, A packed (tile 6 x 16); past 672 columns: mc 84, nc 848, A sliver in L1");
  REQUIRE(loom::kernels::cpu::describe(blocking(84, 672, true, a_sliver), cpu_kernels(CpuIsa::portable).sgemm) ==
          "mc 84, nc 672, kc 384, A sliver in L1 (tile 6 x 16)");
  // An A-sliver blocking has no wide form: every width runs it.
  REQUIRE(blocking(84, 672, true, a_sliver).for_columns(100000) == blocking(84, 672, true, a_sliver));
  // A small L2 sets the block below the cap: 256 KiB (Skylake client) gives AVX2 128 KiB, 14 slivers.
  CpuCaches skylake = zen3;
  skylake.l2 = {256 << 10, 4, 1};
  REQUIRE(choose_sgemm_blocking(6, 16, skylake).mc == 84);
}

TEST_CASE("the GEMM blocking stays whole slivers on odd caches", "[gemm][sgemm][blocking]") {
  // No L3: the B panel takes half of the L2 (512 KiB / (1536 x 16) = 21 slivers = 336 columns).
  CpuCaches no_l3 = zen4;
  no_l3.l3 = {};
  REQUIRE(choose_sgemm_blocking(6, 16, no_l3).nc == 336);
  // Caches far too small for one sliver: one sliver each, never zero.
  const CpuCaches tiny{{1024, 2, 1}, {2048, 2, 1}, {0, 0, 1}, "tiny"};
  REQUIRE(choose_sgemm_blocking(6, 16, tiny) == blocking(6, 16, true, a_sliver));
  // Unknown associativity counts as 8 ways: 30 KiB leaves 22.5 KiB past two ways, short of the
  // 24 KiB sliver (12 ways would fit it), so the A sliver stays in L1: an eighth of 512 KiB,
  // 65536 / 9216 = 7 slivers = 42 rows, and half of it for the panel, 262144 / 24576 = 10 slivers =
  // 160 columns.
  CpuCaches unknown_ways = zen3;
  unknown_ways.l1d = {30 << 10, 0, 1};
  REQUIRE(choose_sgemm_blocking(6, 16, unknown_ways) == blocking(42, 160, true, a_sliver));
  // A 2-way L1 has no two ways to spare: the same.
  CpuCaches two_way = zen3;
  two_way.l1d.ways = 2;
  REQUIRE(choose_sgemm_blocking(6, 16, two_way) == blocking(42, 160, true, a_sliver));
  // An L2 shared by two hyper-threads below the cap: half of the 128 KiB share, 65536 / 9216 = 7
  // slivers = 42 rows. CPUID's count is an upper bound: 4 counts as 2.
  CpuCaches shared_l2 = zen3;
  shared_l2.l2 = {256 << 10, 4, 2};
  REQUIRE(choose_sgemm_blocking(6, 16, shared_l2).mc == 42);
  CpuCaches shared_by_4 = shared_l2;
  shared_by_4.l2.shared_by = 4;
  REQUIRE(choose_sgemm_blocking(6, 16, shared_by_4).mc == 42);
  // A huge L2 (32 MiB): the AVX-512 panel stops at sgemm_max_nc columns, the A block at 128 KiB.
  CpuCaches huge_l2 = zen4;
  huge_l2.l2 = {32 << 20, 16, 1};
  REQUIRE(choose_sgemm_blocking(14, 32, huge_l2) == blocking(84, 4096, true, a_sliver));
  CpuCaches private_l2 = sapphire_rapids;  // (the 2-core Xeon: AVX2 has a wide form there)
  private_l2.l2.shared_by = 1;
  for (const CpuCaches& caches :
       {zen3, zen4, sapphire_rapids, private_l2, no_l3, tiny, unknown_ways, two_way, shared_l2, shared_by_4, huge_l2}) {
    for (const auto& [mr, nr] : {std::pair<std::int64_t, std::int64_t>{6, 16}, {14, 32}}) {
      const SgemmBlocking b = choose_sgemm_blocking(mr, nr, caches);
      INFO(caches.source << " tile " << mr << " x " << nr);
      REQUIRE(b.kc == loom::kernels::cpu::sgemm_kc);
      REQUIRE((b.mc >= mr && b.mc % mr == 0));
      REQUIRE((b.nc >= nr && b.nc % nr == 0 && b.nc <= loom::kernels::cpu::sgemm_max_nc));
      // A is packed in the B-sliver order, wide form included, and read in place in the A-sliver order.
      REQUIRE(b.a_in_place == (b.l1 == SgemmL1::a_sliver));
      REQUIRE(b.for_columns(100000).a_in_place == b.a_in_place);
      // The wide form, where there is one, is whole slivers too, and only the B-sliver order has it.
      if (b.wide_n > 0) {
        REQUIRE(b.l1 == SgemmL1::b_sliver);
        REQUIRE((b.wide_mc >= mr && b.wide_mc % mr == 0));
        REQUIRE((b.wide_n >= nr && b.wide_n % nr == 0 && b.wide_n <= loom::kernels::cpu::sgemm_max_nc));
        REQUIRE((b.wide_nc >= b.wide_n && b.wide_nc % nr == 0 && b.wide_nc <= loom::kernels::cpu::sgemm_max_nc));
      } else {
        REQUIRE((b.wide_nc == 0 && b.wide_mc == 0));
      }
    }
  }
}

TEST_CASE("the GEMM engine refuses a blocking that is not whole slivers", "[gemm][sgemm][blocking]") {
  const auto& kernels = cpu_kernels(CpuIsa::portable);  // 6 x 16
  const float a = 1.0f, b = 1.0f;
  float c = 0.0f;
  auto run = [&](const SgemmBlocking& bad) {
    loom::kernels::cpu::sgemm_blocked(bad, 1, 1, 1, {&a, 1, 1}, {&b, 1, 1}, &c, 1, 1, kernels);
  };
  SgemmBlocking deep = blocking(6, 16, true);
  deep.kc = 256;
  for (const SgemmBlocking& bad : {blocking(7, 16, true), blocking(0, 16, true), blocking(6, 8, true), deep}) {
    try {
      run(bad);
      FAIL("accepted mc " << bad.mc << " nc " << bad.nc << " kc " << bad.kc);
    } catch (const loom::Error& error) {
      REQUIRE(error.category() == loom::ErrorCategory::invalid_argument);
      REQUIRE_THAT(error.what(), Catch::Contains("is not whole slivers of the tile at depth 384"));
    }
  }
}

TEST_CASE("the GEMM copies A's rows before reading them only where they are a multiple of 4 KiB apart",
          "[gemm][sgemm][blocking]") {
  using loom::kernels::cpu::sgemm_copies_a;
  using loom::kernels::cpu::sgemm_max_copied_rows;
  const SgemmBlocking a_order = blocking(84, 320, true, a_sliver);
  const float* data = nullptr;  // only the strides matter
  const SgemmOperand aliased{data, 1024, 1}, aliased_12k{data, 3072, 1}, wider{data, 1152, 1}, half{data, 512, 1};
  CHECK(sgemm_copies_a(a_order, 1024, 768, aliased, SgemmCausal::none, 1));
  CHECK(sgemm_copies_a(a_order, 1024, 768, aliased_12k, SgemmCausal::none, 2));
  CHECK_FALSE(sgemm_copies_a(a_order, 1024, 768, wider, SgemmCausal::none, 1));
  // 2 KiB apart: the 14 rows of a sliver fall in 2 sets of L1 lines, 7 in each, within the ways.
  CHECK_FALSE(sgemm_copies_a(a_order, 1024, 768, half, SgemmCausal::none, 1));
  // One panel (n <= nc) reads A once: a copy would only add a write; under two panels' width
  // (n < 2 nc) the re-read panels do not pay for it.
  CHECK_FALSE(sgemm_copies_a(a_order, 1024, 320, aliased, SgemmCausal::none, 1));
  CHECK_FALSE(sgemm_copies_a(a_order, 1024, 321, aliased, SgemmCausal::none, 1));
  CHECK_FALSE(sgemm_copies_a(a_order, 1024, 639, aliased, SgemmCausal::none, 1));
  CHECK(sgemm_copies_a(a_order, 1024, 640, aliased, SgemmCausal::none, 1));
  // Not in the B-sliver order, not for a packed or a transposed A, not in a causal mode.
  CHECK_FALSE(sgemm_copies_a(blocking(84, 320, true), 1024, 768, aliased, SgemmCausal::none, 1));
  CHECK_FALSE(sgemm_copies_a(blocking(84, 320, false, a_sliver), 1024, 768, aliased, SgemmCausal::none, 1));
  CHECK_FALSE(sgemm_copies_a(a_order, 1024, 768, SgemmOperand{data, 1, 1024}, SgemmCausal::none, 1));
  CHECK_FALSE(sgemm_copies_a(a_order, 1024, 768, aliased, SgemmCausal::a_lower, 1));
  // The buffer is bounded: at most sgemm_max_copied_rows rows a thread.
  CHECK(sgemm_copies_a(a_order, 2 * sgemm_max_copied_rows, 768, aliased, SgemmCausal::none, 2));
  CHECK_FALSE(sgemm_copies_a(a_order, 2 * sgemm_max_copied_rows + 1, 768, aliased, SgemmCausal::none, 2));
}

TEST_CASE("the GEMM packs a transposed A read in place where its depths are a page or more apart",
          "[gemm][sgemm][blocking]") {
  using loom::kernels::cpu::sgemm_packs_columns;
  const float* data = nullptr;  // only the strides matter
  CHECK(sgemm_packs_columns(SgemmOperand{data, 1, 1024}));  // 4 KiB: a page per depth
  CHECK(sgemm_packs_columns(SgemmOperand{data, 1, 3072}));  // GPT-2 small's dW of the MLP
  // Below a page it is read in place (the A-sliver order brings each sliver into L1 once a panel).
  for (const std::int64_t lda : {128, 384, 768, 1023}) CHECK_FALSE(sgemm_packs_columns(SgemmOperand{data, 1, lda}));
  // Only a transposed A (rows contiguous): an A with contiguous depths is read as rows.
  CHECK_FALSE(sgemm_packs_columns(SgemmOperand{data, 1024, 1}));
  CHECK_FALSE(sgemm_packs_columns(SgemmOperand{data, 2048, 4096}));
}

TEST_CASE("the GEMM splits the columns into the fewest B panels, as even as whole slivers allow", "[gemm][sgemm][blocking]") {
  using loom::kernels::cpu::sgemm_panel_columns;
  CHECK(sgemm_panel_columns(2048, 672, 16) == 512);  // not 672, 672, 672 and 32
  CHECK(sgemm_panel_columns(768, 672, 32) == 384);
  CHECK(sgemm_panel_columns(2304, 672, 16) == 576);
  CHECK(sgemm_panel_columns(3072, 672, 32) == 640);  // 4 x 640 and 512
  CHECK(sgemm_panel_columns(1344, 672, 16) == 672);  // already even
  CHECK(sgemm_panel_columns(100, 672, 16) == 112);   // one panel, whole slivers
  CHECK(sgemm_panel_columns(1, 672, 32) == 32);
  for (const std::int64_t nr : {16, 32}) {
    for (std::int64_t nc = nr; nc <= 8 * nr; nc += nr) {
      for (std::int64_t n = 1; n <= 40 * nr; ++n) {
        INFO("n " << n << ", nc " << nc << ", nr " << nr);
        const std::int64_t width = sgemm_panel_columns(n, nc, nr), panels = (n + width - 1) / width;
        REQUIRE(width % nr == 0);
        REQUIRE(width <= nc);
        REQUIRE(panels == (n + nc - 1) / nc);  // no more panels than nc-wide ones
        // The last panel is short of the others by under a sliver per panel: as even as slivers allow.
        REQUIRE(width - (n - (panels - 1) * width) < panels * nr);
      }
    }
  }
}

TEST_CASE("a thread's rows run in the fewest blocks of at most mc, their slivers shared out evenly",
          "[gemm][sgemm][blocking]") {
  using loom::kernels::cpu::sgemm_row_blocks;
  using loom::kernels::cpu::SgemmRowBlocks;
  const auto sizes = [](const SgemmRowBlocks& blocks) {
    std::vector<std::int64_t> out;
    for (std::int64_t b = 0; b < blocks.count; ++b) out.push_back(blocks.begin(b + 1) - blocks.begin(b));
    return out;
  };
  using Sizes = std::vector<std::int64_t>;
  // The B-sliver order (unit mr): not six of 168 and 16, not three of 168 and 8 (a thread's half at
  // 2 threads); 171 slivers (the last of 4 rows) in 7 blocks.
  CHECK(sizes(sgemm_row_blocks(1024, 168, 6)) == Sizes{144, 144, 150, 144, 150, 144, 148});
  CHECK(sizes(sgemm_row_blocks(512, 168, 6)) == Sizes{126, 132, 126, 128});
  CHECK(sizes(sgemm_row_blocks(1008, 168, 6)) == Sizes(6, 168));  // already even
  CHECK(sizes(sgemm_row_blocks(100, 168, 6)) == Sizes{100});      // one block
  // One rounded height for every block would round back up to mc here: 27 of 168 and one of 1.
  const Sizes many = sizes(sgemm_row_blocks(4537, 168, 6));
  CHECK(many.size() == 28);
  CHECK(*std::min_element(many.begin(), many.end()) >= 156);
  // The A-sliver order (unit mc): blocks of mc and what is left.
  Sizes twelve(12, 84);
  twelve.push_back(16);
  CHECK(sizes(sgemm_row_blocks(1024, 84, 84)) == twelve);
  CHECK(sgemm_row_blocks(0, 168, 6).count == 0);
  CHECK(sgemm_row_blocks(0, 168, 6).begin(0) == 0);
  // Blocks that are not whole units are refused, by name.
  for (const auto& [mc, unit] : {std::pair<std::int64_t, std::int64_t>{168, 0}, {4, 6}, {170, 6}}) {
    INFO("mc " << mc << ", unit " << unit);
    REQUIRE_THROWS_WITH(sgemm_row_blocks(100, mc, unit), Catch::Contains("sgemm_row_blocks") &&
                                                             Catch::Contains("not whole units"));
  }
  for (const std::int64_t mr : {6, 14}) {
    for (std::int64_t mc = mr; mc <= 8 * mr; mc += mr) {
      for (const std::int64_t unit : {mr, mc}) {
        for (std::int64_t rows = 1; rows <= 200 * mr; ++rows) {
          INFO("rows " << rows << ", mc " << mc << ", unit " << unit);
          const SgemmRowBlocks blocks = sgemm_row_blocks(rows, mc, unit);
          REQUIRE(blocks.count == (rows + mc - 1) / mc);  // no more blocks than mc-row ones
          REQUIRE(blocks.begin(0) == 0);
          REQUIRE(blocks.begin(blocks.count) == rows);
          const Sizes s = sizes(blocks);
          for (std::int64_t b = 0; b < blocks.count; ++b) {
            REQUIRE(blocks.begin(b) % unit == 0);  // whole units from the thread's first row
            REQUIRE((s[b] > 0 && s[b] <= mc));
          }
          // As even as whole units go; the last may also hold the one short unit.
          REQUIRE(*std::max_element(s.begin(), s.end()) - *std::min_element(s.begin(), s.end()) < 2 * unit);
        }
      }
    }
  }
}

TEST_CASE("the GEMM's threads split C's columns where that measured faster, and its rows otherwise",
          "[gemm][sgemm][blocking]") {
  using loom::kernels::cpu::sgemm_splits_columns;
  using loom::kernels::cpu::SgemmKernels;
  SgemmKernels avx2_tile, avx512_tile;  // only the tile's size matters
  avx2_tile.mr = 6;
  avx2_tile.nr = 16;
  avx512_tile.mr = 14;
  avx512_tile.nr = 32;
  const SgemmBlocking b_order = blocking(168, 4096, true), a_order = blocking(84, 672, true, a_sliver);
  const SgemmCausal none = SgemmCausal::none;
  // One thread, or no columns to share: rows (the one-thread engine).
  CHECK_FALSE(sgemm_splits_columns(a_order, avx512_tile, 128, 768, none, 1));
  CHECK_FALSE(sgemm_splits_columns(a_order, avx512_tile, 128, 32, none, 2));   // one sliver for two threads
  // Few rows, but fewer than 2 slivers of columns a thread: each A sliver would serve one B sliver.
  CHECK_FALSE(sgemm_splits_columns(a_order, avx512_tile, 128, 96, none, 2));   // 3 slivers: 1 and 2
  CHECK(sgemm_splits_columns(a_order, avx512_tile, 128, 97, none, 2));         // 4, the last short
  CHECK_FALSE(sgemm_splits_columns(a_order, avx512_tile, 128, 1024, none, 32));
  // A share of rows under 140: dW of a 128- or 256-row layer, both orders.
  CHECK(sgemm_splits_columns(a_order, avx512_tile, 128, 128, none, 2));
  CHECK(sgemm_splits_columns(a_order, avx512_tile, 277, 128, none, 2));        // 139 rows a thread
  CHECK_FALSE(sgemm_splits_columns(a_order, avx512_tile, 279, 128, none, 2));  // 140: not under
  CHECK(sgemm_splits_columns(b_order, avx2_tile, 256, 16 * 4, none, 2));
  CHECK_FALSE(sgemm_splits_columns(b_order, avx2_tile, 280, 16 * 4, none, 2));
  CHECK(sgemm_splits_columns(b_order, avx2_tile, 417, 4096, none, 3));         // 139 rows a thread
  // The A-sliver order with enough rows: 12 slivers of columns a thread or more (n >= 737 at 2 threads).
  CHECK_FALSE(sgemm_splits_columns(a_order, avx512_tile, 1024, 512, none, 2));
  CHECK_FALSE(sgemm_splits_columns(a_order, avx512_tile, 1024, 736, none, 2));  // 23 slivers: 11 and 12
  CHECK(sgemm_splits_columns(a_order, avx512_tile, 1024, 737, none, 2));        // 24, the last short
  CHECK(sgemm_splits_columns(a_order, avx512_tile, 1024, 768, none, 2));
  CHECK(sgemm_splits_columns(a_order, avx512_tile, 2048, 2048, none, 2));
  CHECK_FALSE(sgemm_splits_columns(a_order, avx512_tile, 2048, 2048, none, 6));  // 10 slivers a thread
  // The B-sliver order with 140 rows a thread or more: 24 slivers of columns a thread or more (n >= 753
  // at 2 threads with 16-column slivers), rows below that.
  CHECK_FALSE(sgemm_splits_columns(b_order, avx2_tile, 1024, 128, none, 2));
  CHECK_FALSE(sgemm_splits_columns(b_order, avx2_tile, 1024, 512, none, 2));  // the width-128 step's widest
  CHECK_FALSE(sgemm_splits_columns(b_order, avx2_tile, 1024, 752, none, 2));  // 47 slivers: 23 and 24
  CHECK(sgemm_splits_columns(b_order, avx2_tile, 1024, 753, none, 2));        // 48, the last short
  CHECK(sgemm_splits_columns(b_order, avx2_tile, 1024, 768, none, 2));
  CHECK(sgemm_splits_columns(b_order, avx2_tile, 1024, 4096, none, 2));
  CHECK(sgemm_splits_columns(b_order, avx2_tile, 420, 4096, none, 3));        // 85 slivers a thread
  CHECK_FALSE(sgemm_splits_columns(b_order, avx2_tile, 2048, 2048, none, 6));  // 21 slivers a thread
  // Never in a causal mode, even when asked: c_lower places its diagonal by column.
  for (const SgemmCausal causal : {SgemmCausal::c_lower, SgemmCausal::a_lower, SgemmCausal::a_upper}) {
    CHECK_FALSE(sgemm_splits_columns(b_order, avx2_tile, 128, 1024, causal, 2));
    SgemmBlocking asked = b_order;
    asked.split = SgemmSplit::columns;
    CHECK_FALSE(sgemm_splits_columns(asked, avx2_tile, 128, 1024, causal, 2));
  }
  // A blocking that names a split gets it (with two threads or more).
  SgemmBlocking rows = a_order, columns = a_order;
  rows.split = SgemmSplit::rows;
  columns.split = SgemmSplit::columns;
  CHECK_FALSE(sgemm_splits_columns(rows, avx512_tile, 128, 128, none, 2));
  CHECK(sgemm_splits_columns(columns, avx512_tile, 1024, 32, none, 2));
  CHECK_FALSE(sgemm_splits_columns(columns, avx512_tile, 1024, 32, none, 1));
  REQUIRE_THAT(describe(columns, avx512_tile), Catch::Contains("threads split the columns"));
}

// Not tagged [sgemm]: the emulated-CPU runs (tests/portable) would only repeat, 100 times slower,
// variants this test already runs natively; CI's -march=native build runs it by [blocking].
TEST_CASE("the GEMM gives the same bits for every blocking, A read packed or in place, every variant and thread count",
          "[gemm][blocking]") {
  std::mt19937 rng(21);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  struct Case {
    std::int64_t m, n, k;
    bool trans_a, trans_b;
    SgemmCausal causal;
    std::int64_t lda = 0;  // A's leading dimension; 0: packed tight (k, or m transposed)
  };
  // Ragged in every direction, deeper than one pass (384), each A layout (rows: A's depth
  // contiguous; columns: its rows contiguous), and the causal modes.
  const Case cases[] = {{131, 70, 500, false, false, SgemmCausal::none}, {131, 70, 500, true, false, SgemmCausal::none},
                        {97, 45, 800, false, true, SgemmCausal::none},   {97, 45, 800, true, true, SgemmCausal::none},
                        {150, 150, 150, false, false, SgemmCausal::c_lower},
                        {150, 40, 150, false, false, SgemmCausal::a_lower},
                        {150, 40, 150, true, false, SgemmCausal::a_upper},
                        // Rows 4 KiB and 8 KiB apart: copied a pass at a time in the A-sliver order
                        // where n >= 2 nc (n = 200: with one- and three-sliver panels in each tile).
                        {131, 200, 500, false, false, SgemmCausal::none, 1024},
                        {45, 100, 900, false, true, SgemmCausal::none, 2048},
                        // Transposed A with depths a page or more apart: packed a block at a time
                        // (sgemm_packs_columns), also where a_upper skips depths of the packed block;
                        // the tight transposed cases above are packed so in the blockings without
                        // a_in_place.
                        {131, 70, 500, true, false, SgemmCausal::none, 1024},
                        {97, 45, 800, true, true, SgemmCausal::none, 3072},
                        {150, 40, 150, true, false, SgemmCausal::a_upper, 1030},
                        {150, 40, 150, true, false, SgemmCausal::a_lower, 1024},
                        {150, 150, 150, true, false, SgemmCausal::c_lower, 1024}};
  for (const Case& t : cases) {
    const std::int64_t lda = t.lda != 0 ? t.lda : t.trans_a ? t.m : t.k;
    const auto a_at = [&](std::int64_t i, std::int64_t p) {
      return static_cast<std::size_t>(t.trans_a ? p * lda + i : i * lda + p);
    };
    std::vector<float> a(static_cast<std::size_t>((t.trans_a ? t.k : t.m) * lda)), b(static_cast<std::size_t>(t.k * t.n));
    for (float& v : a) v = dist(rng);
    for (float& v : b) v = dist(rng);
    if (t.causal == SgemmCausal::a_lower || t.causal == SgemmCausal::a_upper) {
      for (std::int64_t i = 0; i < t.m; ++i) {
        for (std::int64_t p = 0; p < t.k; ++p) {
          const bool zero = t.causal == SgemmCausal::a_lower ? p > i : p < i;
          if (zero) a[a_at(i, p)] = 0.0f;
        }
      }
    }
    const SgemmOperand lhs = t.trans_a ? SgemmOperand{a.data(), 1, lda} : SgemmOperand{a.data(), lda, 1};
    const SgemmOperand rhs = t.trans_b ? SgemmOperand{b.data(), 1, t.k} : SgemmOperand{b.data(), t.n, 1};
    // A bias row (causal mode none): C as without it, then + bias[j] as a separate rounding, in
    // every blocking (one panel or many, each L1 order, A packed, in place or copied a pass at a time).
    std::vector<float> bias(static_cast<std::size_t>(t.n));
    for (float& v : bias) v = 50.0f * dist(rng);
    for (const bool accumulate : {false, true}) {
      auto run = [&](const SgemmBlocking& blk, CpuIsa isa, int threads, bool with_bias = false) {
        std::vector<float> c(static_cast<std::size_t>(t.m * t.n), 0.5f);
        loom::kernels::cpu::sgemm_blocked(blk, t.m, t.n, t.k, lhs, rhs, c.data(), t.n, threads, cpu_kernels(isa),
                                          accumulate, t.causal, with_bias ? bias.data() : nullptr);
        if (t.causal == SgemmCausal::c_lower) {  // above the diagonal is unspecified
          for (std::int64_t i = 0; i < t.m; ++i) {
            for (std::int64_t j = i + 1; j < t.n; ++j) c[static_cast<std::size_t>(i * t.n + j)] = 0.0f;
          }
        }
        return c;
      };
      const std::vector<float> reference = run(blocking(6, 16, false), CpuIsa::portable, 1);
      std::vector<float> reference_bias = reference;
      for (std::size_t at = 0; at < reference_bias.size(); ++at) reference_bias[at] += bias[at % bias.size()];
      // The reference against fp64, so that "the same bits" are also the right ones.
      for (std::int64_t i = 0; i < t.m; i += 7) {
        for (std::int64_t j = 0; j < t.n && (t.causal != SgemmCausal::c_lower || j <= i); j += 5) {
          double exact = accumulate ? 0.5 : 0.0, magnitude = std::fabs(exact);
          for (std::int64_t p = 0; p < t.k; ++p) {
            const double term = static_cast<double>(a[a_at(i, p)]) *
                                b[static_cast<std::size_t>(t.trans_b ? j * t.k + p : p * t.n + j)];
            exact += term;
            magnitude += std::fabs(term);
          }
          REQUIRE(std::fabs(reference[static_cast<std::size_t>(i * t.n + j)] - exact) <=
                  (static_cast<double>(t.k) + 6) * std::ldexp(1.0, -24) * magnitude + 1e-30);
        }
      }
      for (const CpuIsa isa : supported_cpu_isas()) {
        const auto& tile = cpu_kernels(isa).sgemm;
        // A B-sliver blocking with a wide form past 3 slivers, as the engine picks it for this width
        // (the cases run both sides of the switch), and the blocking chosen for this CPU, likewise.
        // A packed in both forms, as the blockings chosen for AVX2 pack it.
        SgemmBlocking wide = blocking(2 * tile.mr, 3 * tile.nr, false);
        wide.wide_n = 3 * tile.nr;
        wide.wide_nc = 5 * tile.nr;
        wide.wide_mc = 2 * tile.mr;
        for (const SgemmBlocking& blk :
             {blocking(tile.mr, tile.nr, false), blocking(tile.mr, tile.nr, true), blocking(2 * tile.mr, 3 * tile.nr, true),
              blocking(7 * tile.mr, 3 * tile.nr, false), blocking(7 * tile.mr, 3 * tile.nr, true, a_sliver),
              blocking(tile.mr * 40, tile.nr * 256, true), blocking(tile.mr, tile.nr, false, a_sliver),
              blocking(tile.mr, tile.nr, true, a_sliver), blocking(2 * tile.mr, 3 * tile.nr, true, a_sliver),
              blocking(tile.mr * 40, tile.nr * 256, true, a_sliver), wide.for_columns(t.n),
              loom::kernels::cpu::sgemm_blocking(cpu_kernels(isa)).for_columns(t.n)}) {
          // 3 threads with each split of C (by shape, which picks one of them, and each named).
          for (const auto split : {SgemmSplit::by_shape, SgemmSplit::rows, SgemmSplit::columns}) {
            for (const int threads : {1, 3}) {
              if (threads == 1 && split != SgemmSplit::by_shape) continue;  // (one thread does not split)
              SgemmBlocking with_split = blk;
              with_split.split = split;
              INFO(to_string(isa) << " " << describe(with_split, tile) << " in place " << blk.a_in_place
                                  << " threads " << threads << " case " << t.m << "x" << t.n << "x" << t.k << " ta "
                                  << t.trans_a << " tb " << t.trans_b << " causal " << static_cast<int>(t.causal)
                                  << " accumulate " << accumulate);
              REQUIRE(run(with_split, isa, threads) == reference);
              if (t.causal == SgemmCausal::none) REQUIRE(run(with_split, isa, threads, true) == reference_bias);
            }
          }
        }
      }
    }
  }
}
