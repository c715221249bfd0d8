// loom's CPU fp32 GEMM engine: C = op(A) op(B) for strided operands, in the style of BLIS/GotoBLAS.
// B is packed once per (kc x nc) block into nr-column slivers shared by the threads (each thread
// packs its own when they split C's columns: sgemm_splits_columns); each thread works through its
// blocks of A (at most mc x kc, sgemm_row_blocks) in mr-row slivers: packed where the blocking says (a_in_place false: AVX2's
// blockings, wide form included), else read in place where A's rows or depth are contiguous
// (AVX-512's: copied a pass at a time where its rows alias in L1, sgemm_copies_a; a transposed A
// packed a block at a time where its depths are a page or more apart, sgemm_packs_columns) and
// packed otherwise, with
// the mr x nr register-blocked micro-kernel of the CPU's kernel variant (dispatch.hpp: 6 x 16 on
// AVX2, 14 x 32 on AVX-512; a sliver short of mr rows runs the variant's tail kernel for just those
// rows). mc, nc and which sliver stays in L1 come from the CPU's caches
// (sgemm_blocking.hpp). Threads split the rows of C evenly, or its columns (sgemm_splits_columns), so
// every element of C is written by one thread; its sum runs over k in ascending order with fused
// multiply-adds in passes of kc = 384, whatever the variant, so results are the same bits for any
// thread count, either split and any variant.
#pragma once

#include <cstdint>

#include "kernels/cpu/dispatch.hpp"
#include "kernels/cpu/sgemm_blocking.hpp"

namespace loom::kernels::cpu {

// Element (i, j) of a logical matrix is data[i * row_stride + j * col_stride]; a transpose is
// only a swap of the two strides.
struct SgemmOperand {
  const float* data = nullptr;
  std::int64_t row_stride = 0;
  std::int64_t col_stride = 0;
};

// The triangular structure causal attention gives its products, which lets the engine skip work:
//   c_lower  only C's micro-tiles that reach the lower triangle (j <= i) are computed; entries above
//            the diagonal inside them get the products too, tiles wholly above it are not written.
//   a_lower  A is lower triangular (A[i, p] = 0 for p > i): the depths past a sliver's last row are
//            skipped.
//   a_upper  A is upper triangular (A[i, p] = 0 for p < i): the depths before a sliver's first row
//            are skipped (rows at or past k are zero).
// Skipping a zero term changes no sum (fma(0, b, s) = s for finite b); with an inf or NaN in B, which
// products of it with the zeros count as NaN depends on the micro-tile, and so on the thread count
// (each thread's share of rows starts a sliver), as do the entries above the diagonal that c_lower
// writes.
enum class SgemmCausal { none, c_lower, a_lower, a_upper };

// C[m x n] (row-major, leading dimension ldc) = A[m x k] B[k x n], or C += A B when accumulate
// (each pass of kc adds its partial sums into C). Uses up to max_threads OpenMP threads (1 runs in
// the calling thread) and the given variant's kernels. With a bias (n floats, causal mode none),
// each row of C then gets bias added, rounded as its own addition after the last pass: the bits of
// adding bias to the finished C, without another pass over C (the micro-kernel adds it to the
// tile in its registers). A bias with another causal mode is an invalid_argument Error.
void sgemm(std::int64_t m, std::int64_t n, std::int64_t k, SgemmOperand a, SgemmOperand b, float* c,
           std::int64_t ldc, int max_threads, const CpuKernels& kernels = cpu_kernels(), bool accumulate = false,
           SgemmCausal causal = SgemmCausal::none, const float* bias = nullptr);

// Whether sgemm_blocked copies A's rows before reading them, a pass (kc deep) at a time and each
// thread its own rows, to a stride of min(k, kc) + 16 floats: in the A-sliver order, for an A read in
// place whose rows are a multiple of 4 KiB apart, when n is at least two B panels wide (n >= 2 nc),
// with at most sgemm_max_copied_rows rows a thread (the buffer, kept by the thread for later GEMMs,
// is then at most 6.25 MiB) and no causal mode. The passes then run outer, the panels inner; the bits are
// the same either way. sgemm_blocked asks it with the size of the team it got; when the threads split
// C's columns, each asks it alone for its share of the columns (and copies all of A's rows), so at
// 2 threads A is copied only from n >= 4 nc.
inline constexpr std::int64_t sgemm_max_copied_rows = 4096;
bool sgemm_copies_a(const SgemmBlocking& blocking, std::int64_t m, std::int64_t n, SgemmOperand a,
                    SgemmCausal causal, int threads);

// Whether sgemm_blocked packs A whose rows are contiguous and whose depths are col_stride apart (a
// transposed A), in a blocking that reads A in place (a_in_place): when col_stride is 4 KiB or more,
// so that every depth of a sliver would fall on a page of its own. Such an A is packed a whole
// mc x kc block at a time, one sweep over each depth's run of rows; otherwise it is read in place
// as SgemmALayout::columns. Packing changes no sum. (A blocking without a_in_place packs every A,
// a transposed one also a block at a time.)
bool sgemm_packs_columns(SgemmOperand a);

// Whether sgemm_blocked's threads split C's columns rather than its rows (SgemmSplit: the blocking's
// split when it names one, except that a causal mode always splits rows). Split by rows, the threads
// pack each B panel together and meet at two barriers per pass, and a thread's rows may be few
// slivers; split by columns, each thread packs its own panels (in the B-sliver order, whose panel is
// sized for the shared L3, each a thread's share of nc) and reads all of A (where A is packed, each
// thread packs all of it), and no barrier is met.
// By shape never in a causal mode (c_lower places its diagonal by column, and the causal modes' work
// is uneven across columns; not measured), and the columns when:
//   - a thread's share of rows would be under sgemm_few_rows, with 2 slivers of columns or more for
//     each thread: the dW = dY^T X of a 128-row layer took 0.55x the time with AVX-512 and 0.69x with
//     AVX2 at 2 threads on the Xeon, of a 256-row one 0.86x and 0.88x; 384 rows 1.06x and 0.985x. A
//     GEMM that small pays the rows' barriers and shared packing for little work; or
//   - in the A-sliver order, each thread gets 12 slivers of columns or more (n >= 737 with AVX-512's
//     32 columns at 2 threads). Each A sliver brought into L1 serves a thread's slivers of B: with 2
//     to 8 (n = 128 to 512, 1024 rows) the columns took 1.08-1.26x the time, with 12 or more (n >= 768,
//     AVX-512 and AVX2's wide form) 0.96-0.98x; or
//   - in the B-sliver order, each thread gets 24 slivers of columns or more (n >= 753 with AVX2's 16
//     columns at 2 threads). Split by rows, both threads sweep the whole B panel, packed together
//     between two barriers, from L3 for every block of rows; by columns each sweeps its own half.
//     With Zen 3's blocking (no wide form) on the Xeon, issue 35's six GEMMs (n = 768 to 3072, 1024
//     or 2048 rows) ran 1.00-1.09x OpenBLAS split by columns against 0.94-1.06x by rows (once 0.76),
//     interleaved in one process; in gemm_bench, 0.94-1.03x the time (1024^3 1.025x, 1024x3072x768
//     0.941x) (benchmarks/results/cpu-gemm-even-blocks-xeon-m167-2c-2026-12-07/).
// The B-sliver order keeps the rows below that: with Zen 3's blocking its GEMMs of 1024 x 384..512 x
// 128 ran 1-5% slower split by columns in the two runs that had them, and (this Xeon's blocking, A
// read in place then) the 2-thread GPT step (n <= 512) with its GEMMs split so ran
// 1.2% slower in all 8 pairs (its A, cold in the step, was then read by both cores); with only the
// first two rules it ran 1.2% faster (8 of 8). Measured at 2 threads only: with more, the same
// per-thread shares decide, unmeasured (benchmarks/results/cpu-gemm-column-split-xeon-2c-2026-12-07/).
inline constexpr std::int64_t sgemm_few_rows = 140;
bool sgemm_splits_columns(const SgemmBlocking& blocking, const SgemmKernels& tile, std::int64_t m, std::int64_t n,
                          SgemmCausal causal, int threads);

// The width of sgemm_blocked's B panels for n columns and a blocking of nc (nc a multiple of nr):
// the fewest panels of at most nc columns, as even as whole slivers of nr allow, the last taking
// what is left (n = 2048, nc = 672: four of 512, not three of 672 and one of 32). The panels
// partition the columns only, so the bits do not depend on them.
std::int64_t sgemm_panel_columns(std::int64_t n, std::int64_t nc, std::int64_t nr);

// The blocks of rows one thread runs: the fewest blocks of at most mc rows, each whole units of
// `unit` rows (the last unit may be short), the units shared out as evenly as they go. The engine
// (sgemm_rows) takes the unit to be a sliver (mr) in the B-sliver order (1024 rows, mc = 168, mr = 6:
// 144, 144, 150, 144, 150, 144, 148, not six of 168 and 16) and mc in the A-sliver order (blocks of mc
// and what is left). mc must be a whole number of units (else an invalid_argument error). Blocks
// partition the rows only: the same bits.
struct SgemmRowBlocks {
  std::int64_t rows = 0, unit = 1, units = 0, count = 0;
  std::int64_t begin(std::int64_t b) const;  // the first row of block b; begin(count) == rows
};
SgemmRowBlocks sgemm_row_blocks(std::int64_t rows, std::int64_t mc, std::int64_t unit);

// sgemm with a given cache blocking instead of the one chosen for this CPU (sgemm_blocking.hpp),
// run as given at every width (its wide_n, wide_nc and wide_mc are not looked at; sgemm() applies
// for_columns(n) first; its nc is the widest panel, sgemm_panel_columns the one run; its split as
// sgemm_splits_columns reads it, each thread of a column split running this blocking on its share):
// the same bits whatever the blocking. An invalid_argument Error when its mc or nc is not whole
// slivers of the variant's tile or its kc is not sgemm_kc.
void sgemm_blocked(const SgemmBlocking& blocking, std::int64_t m, std::int64_t n, std::int64_t k, SgemmOperand a,
                   SgemmOperand b, float* c, std::int64_t ldc, int max_threads, const CpuKernels& kernels,
                   bool accumulate = false, SgemmCausal causal = SgemmCausal::none, const float* bias = nullptr);

}  // namespace loom::kernels::cpu
