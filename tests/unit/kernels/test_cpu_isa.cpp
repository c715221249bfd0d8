// The CPU kernel variants (kernels/cpu/dispatch.hpp): every variant this CPU can run computes the
// same bits as the portable one for every table entry, on random data with every tail length and
// on special values; the vector exp is within 2 ulp of fp64; and the variant is chosen from what the
// CPU supports, or LOOM_CPU_ISA, with a named error for anything else.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/dispatch.hpp"
#include "kernels/cpu/isa_kernels.hpp"  // exp and exp_nonpositive over the portable Vec16, below
#include "kernels/cpu/simd/vec16_portable.hpp"
#include "loom/core/error.hpp"
#include "loom/kernels/cpu_isa.hpp"
#include "support/tensor_checks.hpp"

using loom::kernels::CpuIsa;
using loom::kernels::supported_cpu_isas;
using loom::kernels::cpu::cpu_kernels;
using loom::kernels::cpu::CpuKernels;

namespace {

std::vector<float> random_floats(std::int64_t n, std::mt19937& rng, float scale = 3.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

// Bitwise equality, so NaNs and signed zeros count.
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}
bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }
bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// The variants other than portable that this CPU runs.
std::vector<CpuIsa> vector_variants() {
  std::vector<CpuIsa> out;
  for (CpuIsa isa : supported_cpu_isas()) {
    if (isa != CpuIsa::portable) out.push_back(isa);
  }
  return out;
}

// Calls check(kernels, reference) for every vector variant and element counts covering every tail.
template <class Check>
void for_variants_and_sizes(Check&& check) {
  const CpuKernels& reference = cpu_kernels(CpuIsa::portable);
  for (CpuIsa isa : vector_variants()) {
    for (std::int64_t n : {1, 2, 7, 15, 16, 17, 31, 32, 33, 47, 64, 67, 130, 768}) {
      INFO(to_string(isa) << ", n = " << n);
      check(cpu_kernels(isa), reference, n);
    }
  }
}

}  // namespace

TEST_CASE("the CPU reports its kernel variants and the active one is the best unless LOOM_CPU_ISA says otherwise",
          "[kernels][isa]") {
  const std::vector<CpuIsa> supported = supported_cpu_isas();
  REQUIRE(!supported.empty());
  REQUIRE(supported.front() == CpuIsa::portable);
  INFO("this CPU: " << to_string(supported.back()) << ", active: " << to_string(loom::kernels::active_cpu_isa()));
  REQUIRE(loom::kernels::select_cpu_isa("") == supported.back());
  for (CpuIsa isa : supported) {
    REQUIRE(loom::kernels::select_cpu_isa(to_string(isa)) == isa);
    REQUIRE(cpu_kernels(isa).isa == isa);
  }
  REQUIRE(loom::kernels::parse_cpu_isa("avx2") == CpuIsa::avx2);
  REQUIRE_THROWS_MATCHES(loom::kernels::select_cpu_isa("sse9"), loom::Error,
                         loom::test::IsError(loom::ErrorCategory::invalid_argument,
                                             {"unknown CPU instruction set 'sse9'; use portable, avx2 or avx512"}));
  for (CpuIsa isa : {CpuIsa::avx2, CpuIsa::avx512}) {
    if (loom::kernels::cpu_supports(isa)) continue;
    REQUIRE_THROWS_MATCHES(loom::kernels::select_cpu_isa(to_string(isa)), loom::Error,
                           loom::test::IsError(loom::ErrorCategory::invalid_argument, {"this CPU supports only"}));
    REQUIRE_THROWS_MATCHES(cpu_kernels(isa), loom::Error,
                           loom::test::IsError(loom::ErrorCategory::invalid_argument, {"cannot run here"}));
  }
}

TEST_CASE("the vector exp is within 2 ulp of fp64 and handles the edges of the float range", "[kernels][isa]") {
  std::vector<float> x;
  for (float v = -87.3f; v < 88.72f; v += 0.0137f) x.push_back(v);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> small(-1.0f, 1.0f);
  for (int i = 0; i < 2000; ++i) x.push_back(small(rng) * 1e-3f);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> edges = {0.0f, -0.0f, 88.72283172607422f, 88.72283935546875f, 89.0f, 1e30f, inf,
                                    -87.33654022216797f, -87.34f, -103.0f, -1e30f, -inf, nan};
  x.insert(x.end(), edges.begin(), edges.end());
  for (CpuIsa isa : supported_cpu_isas()) {
    INFO(to_string(isa));
    std::vector<float> out(x.size());
    cpu_kernels(isa).exp(x.data(), out.data(), static_cast<std::int64_t>(x.size()));
    for (std::size_t i = 0; i + edges.size() < x.size(); ++i) {
      const double exact = std::exp(static_cast<double>(x[i]));
      INFO("exp(" << x[i] << ") = " << out[i] << ", fp64 " << exact);
      REQUIRE(std::fabs(out[i] - exact) <= 2.0 * std::ldexp(1.0, std::ilogb(exact) - 23));
    }
    const std::size_t e = x.size() - edges.size();
    REQUIRE(out[e] == 1.0f);
    REQUIRE(out[e + 1] == 1.0f);
    REQUIRE(std::isfinite(out[e + 2]));
    REQUIRE(out[e + 2] > 3.4e38f);
    REQUIRE(out[e + 3] == inf);
    REQUIRE(out[e + 4] == inf);
    REQUIRE(out[e + 5] == inf);
    REQUIRE(out[e + 6] == inf);
    REQUIRE(out[e + 7] > 0.0f);
    REQUIRE(out[e + 8] == 0.0f);  // below FLT_MIN: flushed
    REQUIRE(out[e + 9] == 0.0f);
    REQUIRE(out[e + 10] == 0.0f);
    REQUIRE(out[e + 11] == 0.0f);
    REQUIRE(std::isnan(out[e + 12]));
  }
}

// GELU's sigmoid takes e^t with t clamped to +-80 (isa_kernels.hpp): across the range where that
// matters, each variant is fp64's GELU and its derivative to a few ulp, or exactly x and 1 above, 0
// (fp64: under 1e-33) below; never infinite, NaN or subnormal for these x; the epilogue's fused GELU
// is the same.
TEST_CASE("GELU and its derivative hold to fp64 out to the ends of the float range", "[kernels][isa][gelu]") {
  std::vector<float> x;
  for (float v = -12.0f; v <= 12.0f; v += 0.0625f) x.push_back(v);  // through t = +-80 at x = -+9.67
  const std::vector<float> far = {-3.4e38f, -1e30f, -1e6f, -100.0f, -20.0f, 20.0f, 100.0f, 1e6f, 1e30f, 3.4e38f};
  x.insert(x.end(), far.begin(), far.end());
  const auto n = static_cast<std::int64_t>(x.size());
  // fp64's GELU as x sigmoid(2z), which unlike 0.5 x (1 + tanh z) keeps its tail for negative x; its
  // derivative, and the size of the derivative's two terms s and 2 x s (1 - s) dz/dx.
  const auto gelu64 = [](double v) {
    return v / (1 + std::exp(-2 * std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
  };
  struct Grad { double value, terms; };
  const auto grad64 = [](double v) {
    const double k = std::sqrt(2 / M_PI), sg = 1 / (1 + std::exp(-2 * k * (v + 0.044715 * v * v * v)));
    const double second = 2 * v * sg * (1 - sg) * k * (1 + 3 * 0.044715 * v * v);
    return Grad{sg + second, std::fabs(sg) + std::fabs(second)};
  };
  for (CpuIsa isa : supported_cpu_isas()) {
    INFO(to_string(isa));
    const CpuKernels& k = cpu_kernels(isa);
    std::vector<float> out(x.size()), dx(x.size()), ones(x.size(), 1.0f), fused(x.size()), pre(x.size());
    k.gelu_forward(x.data(), out.data(), n);
    k.gelu_backward(x.data(), ones.data(), dx.data(), n);
    k.epilogue_row({x.data(), nullptr, 1.0f, 0.0f, nullptr, pre.data(), fused.data(), n, true});
    REQUIRE(same_bits(fused, out));
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double g = gelu64(x[i]);
      const Grad dg = grad64(x[i]);
      INFO("x " << x[i] << ": gelu " << out[i] << " (fp64 " << g << "), gelu' " << dx[i] << " (fp64 " << dg.value << ")");
      REQUIRE(std::isfinite(out[i]));
      REQUIRE(std::isfinite(dx[i]));
      REQUIRE((out[i] == 0.0f || std::fabs(out[i]) >= std::numeric_limits<float>::min()));
      REQUIRE((dx[i] == 0.0f || std::fabs(dx[i]) >= std::numeric_limits<float>::min()));
      if (x[i] >= 10.0f) {
        REQUIRE(out[i] == x[i]);
        REQUIRE(dx[i] == 1.0f);
      } else if (x[i] <= -10.0f || (out[i] == 0.0f && x[i] != 0.0f)) {
        // Past t = 80 (x below about -9.67) the sigmoid is 0: fp64's GELU there is under 1e-33.
        REQUIRE(x[i] < -9.0f);
        REQUIRE(out[i] == 0.0f);
        REQUIRE(dx[i] == 0.0f);
        REQUIRE(std::fabs(g) < 1e-33);
        REQUIRE(std::fabs(dg.value) < 1e-31);
      } else {
        // The float exponent t carries a few ulp of error, and e^t scales it by |t|: the bound.
        const double t = 1.5957691216057308 * std::fabs(x[i] + 0.044715 * x[i] * x[i] * x[i]);
        const double rel = (8 + t) * 3e-7;
        REQUIRE(std::fabs(out[i] - g) <= rel * std::fabs(g));
        REQUIRE(std::fabs(dx[i] - dg.value) <= rel * dg.terms);
      }
    }
    const float nan = std::numeric_limits<float>::quiet_NaN();
    float y = 0.0f, dy = 0.0f, one = 1.0f;
    k.gelu_forward(&nan, &y, 1);
    k.gelu_backward(&nan, &one, &dy, 1);
    REQUIRE(std::isnan(y));
    REQUIRE(std::isnan(dy));
  }
}

// Softmax and cross-entropy take exp_nonpositive where exp was (isa_kernels.hpp: exp_shifted): for
// every exponent at or below 0, and NaN, it must give exp's bits. The kernel templates are the same
// operations in every variant (the tests above and below hold each variant to the portable one), so
// the portable instantiation stands for all: every 1021st float from -0 to -inf, both zeros, -inf,
// NaNs and the range's ends. A positive exponent (only in a row holding a NaN) is taken as 0.
TEST_CASE("softmax's exp without its top of range gives exp's bits at and below 0", "[kernels][isa][softmax]") {
  using V = loom::kernels::cpu::portable::Vec16;
  std::vector<float> x;
  for (std::uint64_t bits = 0x80000000u; bits <= 0xff800000u; bits += 1021) x.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(bits)));
  for (const float v : {0.0f, -0.0f, -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                        -std::numeric_limits<float>::quiet_NaN(), -87.33654022216797f, -87.3365f, -88.0f, -103.9f,
                        -std::numeric_limits<float>::denorm_min()}) {
    x.push_back(v);
  }
  while (x.size() % 16 != 0) x.push_back(-1.0f);
  for (std::size_t i = 0; i < x.size(); i += 16) {
    float a[16], b[16];
    loom::kernels::cpu::isa::exp<V>(V::load(x.data() + i)).store(a);
    loom::kernels::cpu::isa::exp_nonpositive<V>(V::load(x.data() + i)).store(b);
    for (int j = 0; j < 16; ++j) {
      INFO("x = " << x[i + j] << " (bits " << std::bit_cast<std::uint32_t>(x[i + j]) << "): exp " << a[j]
                  << ", exp_nonpositive " << b[j]);
      REQUIRE(same_bits(a[j], b[j]));
    }
  }
  float one[16];
  loom::kernels::cpu::isa::exp_nonpositive<V>(V::broadcast(3.0e38f)).store(one);
  REQUIRE(one[0] == 1.0f);
}

TEST_CASE("every CPU kernel variant computes the portable variant's bits: elementwise and epilogue",
          "[kernels][isa]") {
  std::mt19937 rng(21);
  for_variants_and_sizes([&](const CpuKernels& k, const CpuKernels& ref, std::int64_t n) {
    std::vector<float> x = random_floats(n, rng, 40.0f), y = random_floats(n, rng);
    x[0] = std::numeric_limits<float>::quiet_NaN();
    if (n > 2) x[2] = -std::numeric_limits<float>::infinity();
    auto run = [&](const CpuKernels& kernels) {
      std::vector<float> e(x.size()), g(x.size()), dg(x.size()), sum(x.size()), out(x.size()), pre(x.size());
      kernels.exp(x.data(), e.data(), n);
      kernels.gelu_forward(x.data(), g.data(), n);
      kernels.gelu_backward(x.data(), y.data(), dg.data(), n);
      kernels.add(x.data(), y.data(), sum.data(), n);
      kernels.epilogue_row({x.data(), y.data(), 0.5f, 2.0f, y.data(), pre.data(), out.data(), n, true});
      std::vector<float> plain(x.size());
      kernels.epilogue_row({x.data(), nullptr, 1.0f, 0.0f, y.data(), nullptr, plain.data(), n, false});
      return std::vector<std::vector<float>>{e, g, dg, sum, out, pre, plain};
    };
    const auto got = run(k), expected = run(ref);
    for (std::size_t i = 0; i < got.size(); ++i) {
      INFO("output " << i);
      REQUIRE(same_bits(got[i], expected[i]));
    }
  });
}

TEST_CASE("every CPU kernel variant computes the portable variant's bits: LayerNorm, softmax, cross-entropy",
          "[kernels][isa]") {
  std::mt19937 rng(22);
  for_variants_and_sizes([&](const CpuKernels& k, const CpuKernels& ref, std::int64_t channels) {
    const std::int64_t rows = 5;
    const std::vector<float> x = random_floats(rows * channels, rng), g = random_floats(rows * channels, rng);
    const std::vector<float> w = random_floats(channels, rng), b = random_floats(channels, rng);
    auto layernorm = [&](const CpuKernels& kernels) {
      std::vector<float> out(x.size()), mean(rows), rstd(rows), dx(x.size()), dw(w.size()), db(w.size());
      kernels.layernorm_forward(x.data(), w.data(), b.data(), out.data(), mean.data(), rstd.data(), rows, channels,
                                1e-5f);
      kernels.layernorm_backward(g.data(), x.data(), w.data(), mean.data(), rstd.data(), nullptr, dx.data(), rows, channels);
      kernels.layernorm_param_grads(g.data(), x.data(), mean.data(), rstd.data(), rows, channels, channels, dw.data(),
                                    db.data());
      // With a residual gradient: dx plus it, the bits `add` gives.
      std::vector<float> fused(x.size()), added(x.size());
      kernels.layernorm_backward(g.data(), x.data(), w.data(), mean.data(), rstd.data(), out.data(), fused.data(), rows,
                                 channels);
      kernels.add(out.data(), dx.data(), added.data(), rows * channels);
      REQUIRE(same_bits(fused, added));
      return std::vector<std::vector<float>>{out, mean, rstd, dx, dw, db, fused};
    };
    const auto ln = layernorm(k), ln_ref = layernorm(ref);
    for (std::size_t i = 0; i < ln.size(); ++i) {
      INFO("LayerNorm output " << i);
      REQUIRE(same_bits(ln[i], ln_ref[i]));
    }
    auto softmax = [&](const CpuKernels& kernels) {
      std::vector<float> p(x.size()), dp(x.size()), scaled(x.size()), dscaled(x.size());
      for (std::int64_t r = 0; r < rows; ++r) {
        const std::int64_t kept = channels - r > 0 ? channels - r : 1;
        kernels.softmax_forward(x.data() + r * channels, p.data() + r * channels, channels, channels, 1.0f);
        kernels.softmax_backward(p.data() + r * channels, g.data() + r * channels, dp.data() + r * channels, channels,
                                 channels);
        kernels.softmax_forward(x.data() + r * channels, scaled.data() + r * channels, channels, kept, 0.125f);
        kernels.softmax_backward(scaled.data() + r * channels, g.data() + r * channels, dscaled.data() + r * channels,
                                 channels, kept);
      }
      return std::vector<std::vector<float>>{p, dp, scaled, dscaled};
    };
    const auto sm = softmax(k), sm_ref = softmax(ref);
    for (std::size_t i = 0; i < sm.size(); ++i) {
      INFO("softmax output " << i);
      REQUIRE(same_bits(sm[i], sm_ref[i]));
    }
    for (std::int64_t target : {std::int64_t{0}, channels / 2, channels - 1}) {
      INFO("target " << target);
      REQUIRE(same_bits(k.cross_entropy_forward(x.data(), channels, target),
                        ref.cross_entropy_forward(x.data(), channels, target)));
      std::vector<float> d(x.begin(), x.begin() + channels), d_ref = d;
      k.cross_entropy_backward(d.data(), d.data(), channels, target, 0.25f);  // in place, as the model does
      ref.cross_entropy_backward(d_ref.data(), d_ref.data(), channels, target, 0.25f);
      REQUIRE(same_bits(d, d_ref));
    }
  });
}

// softmax_forward_causal runs rows of a causal block three at a time (isa_kernels.hpp): every row,
// wherever it falls in a group or the rows left after the groups, must get the bits softmax_forward
// gives it alone, in place or not, with -inf, NaN and huge entries planted.
TEST_CASE("a causal block's softmax gives every row the bits of softmax_forward on that row", "[kernels][isa][softmax]") {
  std::mt19937 rng(31);
  for (const CpuIsa isa : supported_cpu_isas()) {
    const CpuKernels& k = cpu_kernels(isa);
    for (const std::int64_t n : {1, 2, 3, 4, 5, 7, 16, 17, 33, 50, 128}) {
      // Fewer rows than n, as many (attention's), and more (rows past n keep all n entries).
      for (const std::int64_t rows : {std::max<std::int64_t>(1, n / 2), n, n + 2}) {
        for (const float scale : {0.125f, 1.0f}) {
          INFO(to_string(isa) << ", n = " << n << ", rows = " << rows << ", scale " << scale);
          std::vector<float> x = random_floats(rows * n, rng, 20.0f);
          // In the last row, whose kept entries reach furthest: -inf first, NaN in the middle, 3e38
          // (scaled, still finite) at the end; a row past the middle of the block holds -inf alone.
          const std::int64_t last = (rows - 1) * n, kept_last = std::min(rows, n);
          x[last] = -std::numeric_limits<float>::infinity();
          if (kept_last > 2) x[last + kept_last / 2] = std::numeric_limits<float>::quiet_NaN();
          if (kept_last > 1) x[last + kept_last - 1] = 3e38f;
          if (rows > 3 && n > 1) x[(rows / 2) * n + 1] = -std::numeric_limits<float>::infinity();
          std::vector<float> expected(x.size()), out(x.size(), 7.0f), in_place = x;
          for (std::int64_t r = 0; r < rows; ++r) {
            k.softmax_forward(x.data() + r * n, expected.data() + r * n, n, std::min(r + 1, n), scale);
          }
          k.softmax_forward_causal(x.data(), out.data(), rows, n, scale);
          k.softmax_forward_causal(in_place.data(), in_place.data(), rows, n, scale);
          REQUIRE(same_bits(out, expected));
          REQUIRE(same_bits(in_place, expected));
        }
      }
    }
  }
}

TEST_CASE("every CPU kernel variant computes the portable variant's bits: AdamW and gradient sums",
          "[kernels][isa]") {
  std::mt19937 rng(23);
  for_variants_and_sizes([&](const CpuKernels& k, const CpuKernels& ref, std::int64_t n) {
    const std::vector<float> grad = random_floats(n, rng), p0 = random_floats(n, rng), m0 = random_floats(n, rng);
    std::vector<float> v0 = random_floats(n, rng);
    for (float& v : v0) v = v * v;
    const loom::kernels::cpu::AdamWConstants c{0.9f, 0.95f, 0.19f, 0.0975f, 3e-4f, 1e-8f, 3e-5f, 0.7f};
    auto adamw = [&](const CpuKernels& kernels) {
      std::vector<float> p = p0, m = m0, v = v0;
      kernels.adamw(p.data(), m.data(), v.data(), grad.data(), n, c);
      return std::vector<std::vector<float>>{p, m, v};
    };
    const auto got = adamw(k), expected = adamw(ref);
    for (std::size_t i = 0; i < got.size(); ++i) REQUIRE(same_bits(got[i], expected[i]));
    REQUIRE(same_bits(k.sum_of_squares(grad.data(), n), ref.sum_of_squares(grad.data(), n)));
    // 19 rows: two groups of eight (column_sums' register blocking), then three alone. The
    // reference adds each column's rows one by one in order, in double, as the kernel promises.
    // Magnitudes from 2^-60 to 2^60, so that the sums round and another order gives other bits.
    const std::int64_t rows = 19;
    std::vector<float> a = random_floats(rows * (n + 1), rng);
    std::uniform_int_distribution<int> exponent(-60, 60);
    for (float& v : a) v = std::ldexp(v, exponent(rng));
    std::vector<double> sums(static_cast<std::size_t>(n), 0.5), sums_portable = sums, sums_ref = sums;
    k.column_sums(a.data(), rows, n, n + 1, sums.data());
    ref.column_sums(a.data(), rows, n, n + 1, sums_portable.data());
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t j = 0; j < n; ++j) sums_ref[static_cast<std::size_t>(j)] += static_cast<double>(a[r * (n + 1) + j]);
    }
    REQUIRE(same_bits(sums, sums_ref));
    REQUIRE(same_bits(sums_portable, sums_ref));
  });
}

// LayerNorm's parameter gradients interleave blocks of 16 channels in groups of four
// (isa_kernels.hpp: layernorm_param_grads_blocks): every block, wherever it falls, must get the bits
// it gets alone.
TEST_CASE("LayerNorm's parameter gradients give each channel block the bits it gets alone",
          "[kernels][isa][layernorm]") {
  std::mt19937 rng(29);
  const std::int64_t rows = 11;
  for (const CpuIsa isa : supported_cpu_isas()) {
    const CpuKernels& k = cpu_kernels(isa);
    for (const std::int64_t channels : {64, 80, 101, 128, 200}) {  // groups of four blocks, then blocks alone
      INFO(to_string(isa) << ", " << channels << " channels");
      const auto n = rows * channels;
      const std::vector<float> x = random_floats(n, rng, 3.0f), dout = random_floats(n, rng);
      const std::vector<float> mean = random_floats(rows, rng), rstd = random_floats(rows, rng);
      std::vector<float> dw(channels), db(channels), dw1(channels), db1(channels);
      k.layernorm_param_grads(dout.data(), x.data(), mean.data(), rstd.data(), rows, channels, channels, dw.data(),
                              db.data());
      for (std::int64_t c0 = 0; c0 < channels; c0 += 16) {
        k.layernorm_param_grads(dout.data() + c0, x.data() + c0, mean.data(), rstd.data(), rows, channels,
                                std::min<std::int64_t>(16, channels - c0), dw1.data() + c0, db1.data() + c0);
      }
      REQUIRE(same_bits(dw, dw1));
      REQUIRE(same_bits(db, db1));
    }
  }
}
