// loom's packed CPU fp32 GEMM engine (kernels/cpu/sgemm.hpp) on its own, against an fp64 reference
// with the rigorous fp32 dot-product error bound: every kernel variant this CPU runs, transposed
// (strided) operands, sizes that cross the register and depth blocking (MR, NR, KC) of every
// variant with ragged edges, the tail kernels of short slivers, accumulation into C, and results
// that do not depend on the thread count or the variant.
#include <catch2/catch.hpp>

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cpu/sgemm.hpp"

using loom::kernels::CpuIsa;
using loom::kernels::supported_cpu_isas;
using loom::kernels::cpu::cpu_kernels;
using loom::kernels::cpu::sgemm;
using loom::kernels::cpu::SgemmOperand;

namespace {

struct Problem {
  std::int64_t m, n, k;
  bool trans_a, trans_b;
  std::vector<float> a, b;  // stored as op(X) or its transpose, row-major, no padding

  SgemmOperand lhs() const { return trans_a ? SgemmOperand{a.data(), 1, m} : SgemmOperand{a.data(), k, 1}; }
  SgemmOperand rhs() const { return trans_b ? SgemmOperand{b.data(), 1, k} : SgemmOperand{b.data(), n, 1}; }
  double a_at(std::int64_t i, std::int64_t p) const { return a[static_cast<std::size_t>(trans_a ? p * m + i : i * k + p)]; }
  double b_at(std::int64_t p, std::int64_t j) const { return b[static_cast<std::size_t>(trans_b ? j * k + p : p * n + j)]; }
};

Problem make_problem(std::int64_t m, std::int64_t n, std::int64_t k, bool trans_a, bool trans_b, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Problem p{m, n, k, trans_a, trans_b, std::vector<float>(static_cast<std::size_t>(m * k)),
            std::vector<float>(static_cast<std::size_t>(k * n))};
  for (float& v : p.a) v = dist(rng);
  for (float& v : p.b) v = dist(rng);
  return p;
}

// C with a padded leading dimension; the padding is poisoned and must survive. With accumulate, C
// starts at c0(i, j) and must end at c0 + AB.
double c0(std::int64_t i, std::int64_t j) { return 0.25 * static_cast<double>((i * 7 + j * 3) % 11) - 1.0; }

void check(const Problem& p, CpuIsa isa, int threads, bool accumulate = false) {
  const std::int64_t ldc = p.n + 3;
  std::vector<float> c(static_cast<std::size_t>(p.m * ldc), std::nanf(""));
  if (accumulate) {
    for (std::int64_t i = 0; i < p.m; ++i) {
      for (std::int64_t j = 0; j < p.n; ++j) c[static_cast<std::size_t>(i * ldc + j)] = static_cast<float>(c0(i, j));
    }
  }
  sgemm(p.m, p.n, p.k, p.lhs(), p.rhs(), c.data(), ldc, threads, cpu_kernels(isa), accumulate);
  const double unit_roundoff = std::ldexp(1.0, -24);
  for (std::int64_t i = 0; i < p.m; ++i) {
    for (std::int64_t j = 0; j < ldc; ++j) {
      const float got = c[static_cast<std::size_t>(i * ldc + j)];
      if (j >= p.n) {
        REQUIRE(std::isnan(got));
        continue;
      }
      double exact = accumulate ? c0(i, j) : 0.0, magnitude = std::fabs(exact);
      for (std::int64_t q = 0; q < p.k; ++q) {
        exact += p.a_at(i, q) * p.b_at(q, j);
        magnitude += std::fabs(p.a_at(i, q) * p.b_at(q, j));
      }
      // |fl(sum) - sum| <= gamma_k * sum |a b|, gamma_k ~ k u; more u for the passes and the store.
      const double bound = (static_cast<double>(p.k) + 6) * unit_roundoff * magnitude + 1e-30;
      INFO("C[" << i << "," << j << "] m=" << p.m << " n=" << p.n << " k=" << p.k << " ta=" << p.trans_a
                << " tb=" << p.trans_b << " threads=" << threads << " isa=" << to_string(isa)
                << " accumulate=" << accumulate);
      REQUIRE(std::fabs(got - exact) <= bound);
    }
  }
}

}  // namespace

TEST_CASE("packed fp32 GEMM matches fp64 across blocking boundaries, transposes and every kernel variant",
          "[gemm][sgemm]") {
  std::mt19937 rng(11);
  struct Size {
    std::int64_t m, n, k;
  };
  // 1x1x1; one ragged micro tile; k over two KC blocks (384); m not a multiple of MR (6, 14); n over
  // the largest NC (4096) with a ragged last NR sliver. MC depends on the CPU's caches: the blocking
  // tests (test_cpu_sgemm_blocking.cpp) cross it, and NC, with small blockings.
  const Size sizes[] = {{1, 1, 1},      {5, 13, 7},    {6, 16, 400},  {77, 35, 769},
                        {150, 19, 33},  {15, 33, 5},   {200, 70, 390}, {7, 4099, 3}};
  for (const Size& s : sizes) {
    for (int t = 0; t < 4; ++t) {
      const Problem p = make_problem(s.m, s.n, s.k, t & 1, t & 2, rng);
      for (const CpuIsa isa : supported_cpu_isas()) {
        check(p, isa, 2);
        check(p, isa, 1, /*accumulate=*/true);
      }
    }
  }
}

TEST_CASE("packed fp32 GEMM gives bit-identical results for any thread count and any kernel variant",
          "[gemm][sgemm]") {
  std::mt19937 rng(12);
  const Problem p = make_problem(131, 70, 500, false, true, rng);
  auto run = [&](int threads, CpuIsa isa, bool accumulate) {
    std::vector<float> c(static_cast<std::size_t>(p.m * p.n), 0.5f);
    sgemm(p.m, p.n, p.k, p.lhs(), p.rhs(), c.data(), p.n, threads, cpu_kernels(isa), accumulate);
    return c;
  };
  for (const bool accumulate : {false, true}) {
    const std::vector<float> reference = run(1, CpuIsa::portable, accumulate);
    for (const CpuIsa isa : supported_cpu_isas()) {
      INFO(to_string(isa) << " accumulate=" << accumulate);
      REQUIRE(run(1, isa, accumulate) == reference);
      REQUIRE(run(2, isa, accumulate) == reference);
      REQUIRE(run(3, isa, accumulate) == reference);
    }
  }
}

TEST_CASE("threads splitting C's rows or its columns give the bits of one thread", "[gemm][sgemm]") {
  // For each variant, with the blocking this CPU chose: a GEMM whose few rows the threads split by
  // columns and one whose two column slivers they split by rows (sgemm_splits_columns says which),
  // each with an A by rows and transposed (read in place or packed, as the blocking says), fresh C or
  // accumulated, with a bias, at 2 and 3
  // threads. C's leading dimension is padded, so the column shares meet inside rows.
  using loom::kernels::cpu::sgemm_blocking;
  using loom::kernels::cpu::sgemm_splits_columns;
  using loom::kernels::cpu::SgemmCausal;
  std::mt19937 rng(16);
  for (const CpuIsa isa : supported_cpu_isas()) {
    const auto& kernels = cpu_kernels(isa);
    const std::int64_t mr = kernels.sgemm.mr, nr = kernels.sgemm.nr;
    struct Shape {
      std::int64_t m, n, k;
      bool columns;  // the split expected at 2 and 3 threads
    };
    for (const Shape& s : {Shape{4 * mr + 1, 7 * nr + 3, 500, true}, Shape{61 * mr + 5, 2 * nr, 400, false}}) {
      for (const bool trans_a : {false, true}) {
        const Problem p = make_problem(s.m, s.n, s.k, trans_a, false, rng);
        std::vector<float> bias(static_cast<std::size_t>(s.n));
        for (std::size_t j = 0; j < bias.size(); ++j) bias[j] = 0.125f * static_cast<float>(j % 13) - 0.75f;
        const std::int64_t ldc = s.n + 5;
        for (const bool accumulate : {false, true}) {
          auto run = [&](int threads) {
            std::vector<float> c(static_cast<std::size_t>(s.m * ldc), 0.5f);
            sgemm(s.m, s.n, s.k, p.lhs(), p.rhs(), c.data(), ldc, threads, kernels, accumulate, SgemmCausal::none,
                  bias.data());
            return c;
          };
          const std::vector<float> alone = run(1);
          for (const int threads : {2, 3}) {
            INFO(to_string(isa) << " " << s.m << "x" << s.n << "x" << s.k << " trans_a " << trans_a << " threads "
                                << threads << " accumulate " << accumulate);
            REQUIRE(sgemm_splits_columns(sgemm_blocking(kernels).for_columns(s.n), kernels.sgemm, s.m, s.n,
                                         SgemmCausal::none, threads) == s.columns);
            REQUIRE(run(threads) == alone);
          }
        }
      }
    }
  }
}

TEST_CASE("short slivers run the tail kernels, whose bits are those of the full micro-kernel", "[gemm][sgemm]") {
  // m = 2 mr + r ends in a sliver of r rows at 1 thread; 2 and 3 threads split the rows evenly, so
  // each share ends in a short sliver of its own. The same table with its tail kernels removed
  // computes those rows with the full micro-kernel into a scratch tile, as before the tails: the bits
  // must match, and C's padding columns and the rows after m (poisoned) must be left alone.
  std::mt19937 rng(14);
  for (const CpuIsa isa : supported_cpu_isas()) {
    const loom::kernels::cpu::CpuKernels& kernels = cpu_kernels(isa);
    loom::kernels::cpu::CpuKernels no_tails = kernels;
    for (auto& tail : no_tails.sgemm.micro_tail) tail = nullptr;
    for (std::int64_t r = 1; r < kernels.sgemm.mr; ++r) {
      REQUIRE(kernels.sgemm.micro_tail[r] != nullptr);
      for (const bool trans_a : {false, true}) {
        const Problem p = make_problem(2 * kernels.sgemm.mr + r, 2 * kernels.sgemm.nr + 5, 450, trans_a, false, rng);
        const std::int64_t ldc = p.n + 3, rows = p.m + 2;
        for (const int threads : {1, 2, 3}) {
          for (const bool accumulate : {false, true}) {
            INFO(to_string(isa) << " rows " << p.m << " trans_a " << trans_a << " threads " << threads
                                << " accumulate " << accumulate);
            std::vector<float> with(static_cast<std::size_t>(rows * ldc), std::nanf(""));
            for (std::int64_t i = 0; i < p.m; ++i) std::fill_n(with.begin() + i * ldc, p.n, 0.75f);
            std::vector<float> without = with;
            sgemm(p.m, p.n, p.k, p.lhs(), p.rhs(), with.data(), ldc, threads, kernels, accumulate);
            sgemm(p.m, p.n, p.k, p.lhs(), p.rhs(), without.data(), ldc, threads, no_tails, accumulate);
            for (std::int64_t i = 0; i < rows; ++i) {
              for (std::int64_t j = 0; j < ldc; ++j) {
                const std::size_t at = static_cast<std::size_t>(i * ldc + j);
                if (i < p.m && j < p.n) {
                  REQUIRE(with[at] == without[at]);
                } else {
                  REQUIRE(std::isnan(with[at]));
                }
              }
            }
          }
        }
      }
      check(make_problem(kernels.sgemm.mr + r, 40, 50, false, true, rng), isa, 1);  // the tail of r rows
    }
  }
}

TEST_CASE("causal GEMM modes skip only what the triangle makes zero", "[gemm][sgemm]") {
  // c_lower: the lower triangle of C (j <= i) as the dense product; a_lower / a_upper: A with zeros
  // above / below its diagonal gives the dense product everywhere, rows past k of an upper A are 0.
  using loom::kernels::cpu::SgemmCausal;
  std::mt19937 rng(13);
  struct Size {
    std::int64_t m, n, k;
  };
  for (const Size& s : {Size{150, 37, 130}, Size{400, 33, 400}, Size{131, 140, 131}, Size{20, 9, 13}}) {
    for (const SgemmCausal causal : {SgemmCausal::c_lower, SgemmCausal::a_lower, SgemmCausal::a_upper}) {
      Problem p = make_problem(s.m, s.n, s.k, false, false, rng);
      if (causal != SgemmCausal::c_lower) {
        for (std::int64_t i = 0; i < p.m; ++i) {
          for (std::int64_t q = 0; q < p.k; ++q) {
            const bool zero = causal == SgemmCausal::a_lower ? q > i : q < i;
            if (zero) p.a[static_cast<std::size_t>(i * p.k + q)] = 0.0f;
          }
        }
      }
      for (const CpuIsa isa : supported_cpu_isas()) {
        INFO(to_string(isa) << " m=" << s.m << " n=" << s.n << " k=" << s.k << " mode " << static_cast<int>(causal));
        std::vector<float> dense(static_cast<std::size_t>(p.m * p.n)), got(dense.size(), std::nanf(""));
        sgemm(p.m, p.n, p.k, p.lhs(), p.rhs(), dense.data(), p.n, 2, cpu_kernels(isa));
        sgemm(p.m, p.n, p.k, p.lhs(), p.rhs(), got.data(), p.n, 2, cpu_kernels(isa), false, causal);
        for (std::int64_t i = 0; i < p.m; ++i) {
          for (std::int64_t j = 0; j < p.n; ++j) {
            if (causal == SgemmCausal::c_lower && j > i) continue;  // unspecified above the diagonal
            const std::size_t at = static_cast<std::size_t>(i * p.n + j);
            INFO("C[" << i << "," << j << "]");
            REQUIRE(got[at] == dense[at]);
          }
        }
      }
    }
  }
}

TEST_CASE("a bias row joins C after the last pass, with the bits of adding it to the finished C", "[gemm][sgemm]") {
  // The reference is the engine without a bias, then fl(C + bias[j]) element by element: what the
  // GEMM epilogue's separate pass computed. Sizes: ragged tiles, three passes (k = 769 > 2 x 384, so
  // the bias must wait for the last, one deep), tails of short slivers, k = 0; C with poisoned
  // padding, fresh or accumulated into, 1 and 2 threads, every variant (the blockings' test,
  // test_cpu_sgemm_blocking.cpp, runs the bias through many panels, both L1 orders and copied A).
  std::mt19937 rng(15);
  std::uniform_real_distribution<float> dist(-100.0f, 100.0f);
  struct Size {
    std::int64_t m, n, k;
  };
  for (const Size& s : {Size{5, 13, 7}, Size{77, 35, 769}, Size{150, 70, 33}, Size{20, 9, 0}}) {
    const Problem p = make_problem(s.m, s.n, s.k, false, true, rng);
    std::vector<float> bias(static_cast<std::size_t>(s.n));
    for (float& v : bias) v = dist(rng);
    const std::int64_t ldc = s.n + 2;
    for (const CpuIsa isa : supported_cpu_isas()) {
      for (const int threads : {1, 2}) {
        for (const bool accumulate : {false, true}) {
          INFO(to_string(isa) << " m=" << s.m << " n=" << s.n << " k=" << s.k << " threads=" << threads
                              << " accumulate=" << accumulate);
          auto start = [&] {
            std::vector<float> c(static_cast<std::size_t>(s.m * ldc), std::nanf(""));
            for (std::int64_t i = 0; i < s.m; ++i) {
              for (std::int64_t j = 0; j < s.n; ++j) c[static_cast<std::size_t>(i * ldc + j)] = static_cast<float>(c0(i, j));
            }
            return c;
          };
          std::vector<float> expected = start(), got = start();
          sgemm(s.m, s.n, s.k, p.lhs(), p.rhs(), expected.data(), ldc, threads, cpu_kernels(isa), accumulate);
          for (std::int64_t i = 0; i < s.m; ++i) {
            for (std::int64_t j = 0; j < s.n; ++j) expected[static_cast<std::size_t>(i * ldc + j)] += bias[static_cast<std::size_t>(j)];
          }
          sgemm(s.m, s.n, s.k, p.lhs(), p.rhs(), got.data(), ldc, threads, cpu_kernels(isa), accumulate,
                loom::kernels::cpu::SgemmCausal::none, bias.data());
          for (std::size_t at = 0; at < got.size(); ++at) {
            INFO("element " << at);
            if (static_cast<std::int64_t>(at) % ldc >= s.n) {
              REQUIRE(std::isnan(got[at]));  // the padding is left alone
            } else {
              REQUIRE(got[at] == expected[at]);
            }
          }
        }
      }
    }
  }
  // The bias needs every term of the product: with a causal mode some tiles are never finished.
  const float dummy[4] = {};
  std::vector<float> c(4);
  REQUIRE_THROWS_WITH(sgemm(2, 2, 2, {dummy, 2, 1}, {dummy, 2, 1}, c.data(), 2, 1, cpu_kernels(), false,
                            loom::kernels::cpu::SgemmCausal::a_lower, dummy),
                      Catch::Contains("bias") && Catch::Contains("causal"));
}

TEST_CASE("packed fp32 GEMM with k = 0 writes zeros and m or n = 0 writes nothing", "[gemm][sgemm]") {
  std::vector<float> c(6, 7.0f);
  const float dummy = 1.0f;
  sgemm(2, 3, 0, {&dummy, 0, 1}, {&dummy, 3, 1}, c.data(), 3, 2);
  REQUIRE(c == std::vector<float>(6, 0.0f));
  std::vector<float> untouched(4, 5.0f);
  sgemm(0, 2, 4, {&dummy, 4, 1}, {&dummy, 2, 1}, untouched.data(), 2, 2);
  sgemm(2, 0, 4, {&dummy, 4, 1}, {&dummy, 0, 1}, untouched.data(), 0, 2);
  REQUIRE(untouched == std::vector<float>(4, 5.0f));
}

// Attention runs one GEMM per head on each thread of its own team. Each thread's GEMM, of its own
// size (different numbers of passes and panels), must neither wait at the team's barriers nor make
// the other wait, and must give the bits it gives alone; so must a GEMM asking for 2 threads there,
// as a nested region of one thread (one active level, the default) or of two. A barrier of the
// GEMM's reached in the outer team deadlocks this test (ctest's timeout fails it).
TEST_CASE("packed fp32 GEMM runs inside another team's threads, each its own size", "[gemm][sgemm]") {
  std::mt19937 rng(14);
  const Problem problems[2] = {make_problem(37, 50, 100, false, false, rng), make_problem(70, 1300, 1000, true, false, rng)};
  auto run = [&](const Problem& p, int threads) {
    std::vector<float> c(static_cast<std::size_t>(p.m * p.n), 0.0f);
    sgemm(p.m, p.n, p.k, p.lhs(), p.rhs(), c.data(), p.n, threads, cpu_kernels());
    return c;
  };
  const std::vector<float> alone[2] = {run(problems[0], 1), run(problems[1], 1)};
  struct RestoreLevels {  // the process-wide setting back as it was, however the test ends
    int before = omp_get_max_active_levels();
    ~RestoreLevels() { omp_set_max_active_levels(before); }
  } restore;
  for (const int levels : {1, 2}) {
    omp_set_max_active_levels(levels);
    for (const int inner_threads : {1, 2}) {
      INFO("active levels " << levels << ", inner threads " << inner_threads);
      std::vector<float> got[2];
      int team = 0;
#pragma omp parallel num_threads(2)
      {
        const int t = omp_get_thread_num();
#pragma omp single
        team = omp_get_num_threads();
        // The first thread runs its small GEMM three times while the other runs one long one.
        for (int repeat = 0; repeat < (t == 0 ? 3 : 1); ++repeat) got[t] = run(problems[t], inner_threads);
      }
      REQUIRE(team == 2);
      REQUIRE(got[0] == alone[0]);
      REQUIRE(got[1] == alone[1]);
    }
  }
}
