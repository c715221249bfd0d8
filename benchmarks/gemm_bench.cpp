// gemm_bench: loom's GEMM in TFLOP/s against baselines measured in the same run.
// CPU: loom's GEMM (its packed fp32 engine, with its precision handling) in each precision with the
// kernel variant this CPU runs, and loom's fp32 engine with every other vector variant the CPU has
// (--isas), vs Eigen's own fp32 GEMM on the same data and, when built with it, OpenBLAS sgemm, all
// timed round-robin. GPU: loom's GEMM (backend automatic, and loom's own kernels) vs a plain
// cuBLASLt call with a persistent handle, with loom's largest difference from cuBLASLt's result
// relative to its largest value. Both run each layout asked for (NN; TN = A transposed, as in
// dW = dY^T X; NT = B transposed, as in the forward Y = X W^T). Prints a table; --json writes the record.
//
// Eigen is a header library compiled here for the build's target: with -march=native (the
// LOOM_NATIVE_ARCH opt-in) on an AVX-512 CPU, GCC 12 reports -Wmaybe-uninitialized inside
// avx512fintrin.h for the _mm512_undefined_*() operands of intrinsics Eigen inlines, a false
// positive of that header, silenced for Eigen's lines only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <Eigen/Core>
#pragma GCC diagnostic pop
#include <CLI/CLI.hpp>
#include <omp.h>

#include <cmath>
#include <cctype>
#include <cstdio>
#include <functional>
#include <utility>
#include <random>
#include <string>
#include <vector>

#include "bench_report.hpp"
#include "kernels/cpu/sgemm.hpp"
#include "loom/kernels/cast.hpp"
#include "loom/kernels/cpu_isa.hpp"
#include "loom/kernels/gemm.hpp"
#include "loom/loom.hpp"

#if LOOM_WITH_CUDA
#include "cublaslt_baseline.hpp"
#endif

#if LOOM_BENCH_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace {

struct GemmShape {
  std::string name;
  std::int64_t m, n, k;
};

#if LOOM_WITH_CUDA
// max |got - expected| / max |expected| over two tensors of the same shape (copied to the host).
double relative_difference(const loom::Tensor& got, const loom::Tensor& expected) {
  const loom::Tensor g = loom::Tensor::empty(got.shape(), loom::DType::f32);
  const loom::Tensor e = loom::Tensor::empty(expected.shape(), loom::DType::f32);
  loom::kernels::cast(got.to(loom::Device::cpu()), g);
  loom::kernels::cast(expected.to(loom::Device::cpu()), e);
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < g.span<float>().size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(g.span<float>()[i]) - e.span<float>()[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(e.span<float>()[i])));
  }
  return scale > 0 ? diff / scale : diff;
}
#endif


loom::Tensor random_f32(std::int64_t rows, std::int64_t cols, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const loom::Tensor t = loom::Tensor::empty({rows, cols}, loom::DType::f32);
  for (float& v : t.span<float>()) v = dist(rng);
  return t;
}

loom::Tensor cast_to(const loom::Tensor& f32, loom::DType dtype) {
  const loom::Tensor out = loom::Tensor::empty(f32.shape(), dtype);
  const auto in = f32.span<float>();
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (dtype == loom::DType::bf16) out.data<loom::bfloat16>()[i] = loom::to_bfloat16(in[i]);
    else if (dtype == loom::DType::f16) out.data<loom::half>()[i] = loom::to_half(in[i]);
    else out.data<float>()[i] = in[i];
  }
  return out;
}

std::vector<GemmShape> parse_shapes(const std::vector<std::string>& specs) {
  std::vector<GemmShape> shapes;
  for (const std::string& spec : specs) {
    long long m = 0, n = 0, k = 0;
    if (std::sscanf(spec.c_str(), "%lldx%lldx%lld", &m, &n, &k) == 3) {
      shapes.push_back({spec, m, n, k});
    } else if (std::sscanf(spec.c_str(), "%lld", &m) == 1) {
      shapes.push_back({spec + "^3", m, m, m});
    } else {
      loom::fail(loom::ErrorCategory::invalid_argument, "cannot parse GEMM shape '", spec, "'; use N or MxNxK");
    }
  }
  return shapes;
}

// The active variant, then the others shown.
std::vector<loom::kernels::CpuIsa> supported_shown_isas(const std::vector<loom::kernels::CpuIsa>& others) {
  std::vector<loom::kernels::CpuIsa> shown = {loom::kernels::active_cpu_isa()};
  shown.insert(shown.end(), others.begin(), others.end());
  return shown;
}

#if LOOM_BENCH_HAVE_OPENBLAS
// OpenBLAS (built for every x86 core, as Debian's is) picks its kernels from the CPU model it
// knows; one newer than the library (0.3.21 and Sapphire Rapids, model 143 and up) gets the SSE3
// "Prescott" kernels, a third of its speed, which would make the comparison meaningless. The
// suite sets OPENBLAS_CORETYPE (benchmarks/suite/machine.py); run by hand, this says so.
std::string openblas_core_warning(const std::string& core) {
  if (!loom::kernels::cpu_supports(loom::kernels::CpuIsa::avx2)) return "";
  std::string lower = core;
  for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  for (const char* vector_core : {"haswell", "zen", "skylakex", "cooperlake", "sapphirerapids", "excavator"}) {
    if (lower == vector_core) return "";  // (a build for one core names it in capitals)
  }
  return " (WARNING: not an AVX2 kernel on an AVX2 CPU; set OPENBLAS_CORETYPE=" +
         std::string(loom::kernels::cpu_supports(loom::kernels::CpuIsa::avx512) ? "SkylakeX" : "Haswell") +
         ", or Zen on AMD, for a fair baseline)";
}
#endif

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("gemm_bench: loom GEMM throughput against same-run baselines");
  std::string device_name = "cpu", json_path;
  // N^3, then GPT-2 small's four linear layers on 1024 tokens: qkv, attention projection, MLP up, MLP down.
  std::vector<std::string> shape_specs = {"1024",          "2048",          "1024x2304x768",
                                          "1024x768x768",  "1024x3072x768", "1024x768x3072"};
  std::vector<std::string> isa_names, blocking_specs;
  std::vector<std::string> precision_names = {"fp32", "tf32", "bf16"};
  std::vector<std::string> layouts = {"NN"};
  int repeats = 5;
  int pause_ms = 200;
  app.add_option("--device", device_name, "cpu or cuda:N");
  app.add_option("--shapes", shape_specs, "N (N^3) or MxNxK (C[M,N] = A[M,K] B[K,N])")->delimiter(',');
  app.add_option("--precisions", precision_names, "fp32, tf32, fp16, bf16")->delimiter(',');
  app.add_option("--isas", isa_names, "CPU: fp32 rows for these kernel variants besides the active one (portable, "
                 "avx2, avx512; default: every vector variant this CPU has)")->delimiter(',');
  app.add_option("--blockings", blocking_specs,
                 "CPU: fp32 rows of each variant shown with these cache blockings MCxNC (e.g. 84x4096; MCxNC/a or /b "
                 "keeps the A or the B sliver in L1, otherwise the variant's own order) besides "
                 "the one chosen from this CPU's caches")->delimiter(',');
  app.add_option("--layouts", layouts, "NN, TN (A transposed, as in dW = dY^T X), NT (B transposed, as in the "
                 "forward Y = X W^T)")
      ->delimiter(',')
      ->check(CLI::IsMember({"NN", "TN", "NT"}));
  app.add_option("--repeats", repeats, "timed repeats; the median is reported")->check(CLI::PositiveNumber);
  app.add_option("--pause-ms", pause_ms, "CPU: idle time before each timed call, so worker threads left spinning "
                 "by the previous library sleep (OpenBLAS spins ~0.1 s)")->check(CLI::NonNegativeNumber);
  app.add_option("--json", json_path, "write the JSON record here");
  CLI11_PARSE(app, argc, argv);

  try {
    const loom::Device device = loom::Device::parse(device_name);
    const std::vector<GemmShape> shapes = parse_shapes(shape_specs);
    const std::string active_isa(loom::kernels::to_string(loom::kernels::active_cpu_isa()));
    std::vector<loom::kernels::CpuIsa> other_isas;
    if (isa_names.empty()) {
      for (loom::kernels::CpuIsa isa : loom::kernels::supported_cpu_isas()) {
        if (isa != loom::kernels::CpuIsa::portable) isa_names.emplace_back(loom::kernels::to_string(isa));
      }
    }
    for (const std::string& name : isa_names) {
      const loom::kernels::CpuIsa isa = loom::kernels::select_cpu_isa(name);  // a named error if unsupported
      if (name != active_isa) other_isas.push_back(isa);
    }
    // (mc, nc, order: 'a' or 'b' for the sliver kept in L1, 0 for the variant's own)
    struct BlockingSpec {
      std::int64_t mc, nc;
      char l1;
      std::string text;
    };
    std::vector<BlockingSpec> blockings;
    for (const std::string& spec : blocking_specs) {
      long long mc = 0, nc = 0;
      char slash = 0, order = 0, tail = 0;
      const int fields = std::sscanf(spec.c_str(), "%lldx%lld%c%c%c", &mc, &nc, &slash, &order, &tail);
      const bool with_order = fields == 4 && slash == '/' && (order == 'a' || order == 'b');
      if ((fields != 2 && !with_order) || mc <= 0 || nc <= 0) {
        loom::fail(loom::ErrorCategory::invalid_argument, "cannot parse blocking '", spec,
                   "'; use MCxNC or MCxNC/a, MCxNC/b (the A or the B sliver kept in L1), e.g. 84x4096");
      }
      blockings.push_back({mc, nc, with_order ? order : '\0', spec});
    }
    // The engine's blocking for a variant with this spec's mc, nc and order.
    const auto blocking_for = [](const BlockingSpec& spec, loom::kernels::CpuIsa isa) {
      loom::kernels::cpu::SgemmBlocking blocking =
          loom::kernels::cpu::sgemm_blocking(loom::kernels::cpu::cpu_kernels(isa));
      blocking.mc = spec.mc;
      blocking.nc = spec.nc;
      blocking.wide_n = blocking.wide_nc = blocking.wide_mc = 0;  // (sgemm_blocked runs it as given, at every width)
      if (spec.l1 != '\0') {
        blocking.l1 = spec.l1 == 'a' ? loom::kernels::cpu::SgemmL1::a_sliver : loom::kernels::cpu::SgemmL1::b_sliver;
      }
      return blocking;
    };
    // A blocking that is not whole slivers of a variant's tile is refused now, not mid-run.
    for (const loom::kernels::CpuIsa isa : supported_shown_isas(other_isas)) {
      for (const BlockingSpec& spec : blockings) {
        float none = 0.0f;
        loom::kernels::cpu::sgemm_blocked(blocking_for(spec, isa), 0, 0, 0, {&none, 0, 1}, {&none, 0, 1}, &none, 0, 1,
                                          loom::kernels::cpu::cpu_kernels(isa));
      }
    }
    const nlohmann::json cpu = loom::bench::cpu_description();
    nlohmann::json record = loom::bench::make_record(
        "gemm_bench", {{"device", device.to_string()}, {"repeats", repeats}, {"eigen_threads", Eigen::nbThreads()}});
    std::printf("%s\nCPU %s, kernels %s (supported: %s)\nCaches %s\n",
                loom::to_string(loom::build_info()).c_str(), cpu["model"].get<std::string>().c_str(),
                active_isa.c_str(), cpu["supported"].dump().c_str(), cpu["caches"]["text"].get<std::string>().c_str());
    if (device.is_cpu()) {
      std::string blocking_text = loom::bench::gemm_blocking_text(loom::kernels::active_cpu_isa());
      for (const loom::kernels::CpuIsa isa : other_isas) blocking_text += "; " + loom::bench::gemm_blocking_text(isa);
      std::printf("GEMM blocking %s\n", blocking_text.c_str());
#if LOOM_BENCH_HAVE_OPENBLAS
      const std::string core = openblas_get_corename();
      record["config"]["openblas_core"] = core;
      std::printf("OpenBLAS core %s%s\n", core.c_str(), openblas_core_warning(core).c_str());
#endif
    }
    std::printf("GEMM C = op(A) op(B) (layouts NN, TN: A transposed, NT: B transposed), median of %d, %d threads\n\n",
                repeats, Eigen::nbThreads());
    std::printf("%-19s %-6s %-10s %-8s %10s %9s %12s %12s %9s\n", "shape", "prec", "backend", "isa", "ms", "TFLOP/s",
                "vs_baseline", "vs_openblas", "rel_diff");

    std::mt19937 rng(5);
    for (const GemmShape& shape : shapes) {
      const loom::Tensor a32 = random_f32(shape.m, shape.k, rng), b32 = random_f32(shape.k, shape.n, rng);
      const loom::Tensor c32 = loom::Tensor::empty({shape.m, shape.n}, loom::DType::f32);
      const double flops = 2.0 * static_cast<double>(shape.m) * static_cast<double>(shape.n) * static_cast<double>(shape.k);
      // baseline: Eigen (CPU) or cuBLASLt (GPU); openblas: the outside CPU reference, 0 when absent.
      // isa: the CPU kernel variant of a loom row on the CPU, "-" otherwise.
      // difference: loom's result against cuBLASLt's (GPU rows; negative: not measured).
      auto report = [&](const std::string& row_name, const std::string& precision, const std::string& backend,
                        double seconds, double baseline, double openblas = 0.0, const std::string& isa = "-",
                        double difference = -1.0, const std::string& layout = "NN") {
        const double tflops = flops / seconds / 1e12;
        char versus_openblas[32] = "-", diff[32] = "-";
        if (openblas > 0) std::snprintf(versus_openblas, sizeof(versus_openblas), "%.2fx", openblas / seconds);
        if (difference >= 0) std::snprintf(diff, sizeof(diff), "%.1e", difference);
        std::printf("%-19s %-6s %-10s %-8s %10.3f %9.4f %11.2fx %12s %9s\n", row_name.c_str(), precision.c_str(),
                    backend.c_str(), isa.c_str(), seconds * 1e3, tflops, baseline / seconds, versus_openblas, diff);
        nlohmann::json row = {{"shape", row_name}, {"m", shape.m}, {"n", shape.n}, {"k", shape.k},
                              {"precision", precision}, {"backend", backend}, {"isa", isa}, {"ms", seconds * 1e3},
                              {"tflops", tflops}, {"vs_baseline", baseline / seconds}, {"layout", layout}};
        if (const std::size_t space = isa.find(' '); space != std::string::npos) {  // "avx2 168x4096": --blockings
          row["isa"] = isa.substr(0, space);
          row["blocking"] = isa.substr(space + 1);
        }
        if (openblas > 0) row["vs_openblas"] = openblas / seconds;
        if (difference >= 0) row["max_rel_diff_vs_cublaslt"] = difference;
        record["rows"].push_back(row);
      };

      if (device.is_cuda()) {
#if LOOM_WITH_CUDA
        const loom::Stream stream(device);
        for (const std::string& layout : layouts) {
          const bool trans_a = layout[0] == 'T', trans_b = layout[1] == 'T';
          // TN and NT store the transposed operand (with its own random values).
          const loom::Tensor a_stored = trans_a ? random_f32(shape.k, shape.m, rng) : a32;
          const loom::Tensor b_stored = trans_b ? random_f32(shape.n, shape.k, rng) : b32;
          const std::string row_name = shape.name + (layout == "NN" ? "" : " " + layout);
          for (const std::string& name : precision_names) {
            const loom::kernels::GemmPrecision precision = loom::kernels::parse_gemm_precision(name);
            const loom::DType input = loom::kernels::input_dtype(precision);
            const loom::DType output = input;  // the training case: low precision in and out
            const loom::Tensor a = cast_to(a_stored, input).to(device), b = cast_to(b_stored, input).to(device);
            const loom::Tensor reference = loom::Tensor::empty({shape.m, shape.n}, output, device);
            const loom::Tensor c = loom::Tensor::empty({shape.m, shape.n}, output, device);
            const double baseline = loom::bench::time_cublaslt(
                a, b, reference, precision == loom::kernels::GemmPrecision::tf32, repeats, trans_a, trans_b);
            report(row_name, name, "cublaslt", baseline, baseline, 0.0, "-", 0.0, layout);
            loom::kernels::GemmOptions options;
            options.precision = precision;
            options.trans_a = trans_a;
            options.trans_b = trans_b;
            const double seconds = loom::bench::median_seconds([&] { loom::kernels::gemm(a, b, c, options, stream); },
                                                               repeats, stream);
            report(row_name, name, "loom-auto", seconds, baseline, 0.0, "-", relative_difference(c, reference), layout);
            if (precision != loom::kernels::GemmPrecision::fp32) {  // loom's own tensor-core kernels
              options.backend = loom::kernels::GemmBackend::loom;
              const double own = loom::bench::median_seconds([&] { loom::kernels::gemm(a, b, c, options, stream); },
                                                             repeats, stream);
              report(row_name, name, "loom-own", own, baseline, 0.0, "-", relative_difference(c, reference), layout);
            }
          }
        }
        continue;
#else
        loom::fail(loom::ErrorCategory::cuda, "gemm_bench: this build has no CUDA support");
#endif
      }
      // CPU contenders, timed round-robin, in each layout: Eigen's own fp32 GEMM on the same row-major
      // data (the baseline), OpenBLAS sgemm where built with it, and loom in each precision.
      for (const std::string& layout : layouts) {
        const bool trans_a = layout[0] == 'T', trans_b = layout[1] == 'T';
        // TN and NT store the transposed operand (with its own random values), as the GPU rows do.
        const loom::Tensor a_stored = trans_a ? random_f32(shape.k, shape.m, rng) : a32;
        const loom::Tensor b_stored = trans_b ? random_f32(shape.n, shape.k, rng) : b32;
        const std::string row_name = shape.name + (layout == "NN" ? "" : " " + layout);
        const std::int64_t lda = trans_a ? shape.m : shape.k, ldb = trans_b ? shape.k : shape.n;
        const loom::kernels::cpu::SgemmOperand lhs = trans_a ? loom::kernels::cpu::SgemmOperand{a_stored.data<float>(), 1, lda}
                                                             : loom::kernels::cpu::SgemmOperand{a_stored.data<float>(), lda, 1};
        const loom::kernels::cpu::SgemmOperand rhs = trans_b ? loom::kernels::cpu::SgemmOperand{b_stored.data<float>(), 1, ldb}
                                                             : loom::kernels::cpu::SgemmOperand{b_stored.data<float>(), ldb, 1};
        using Map = Eigen::Map<Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;
        struct Name {
          std::string precision, backend, isa;
        };
        std::vector<Name> names = {{"fp32", "eigen", "-"}};
        std::vector<std::function<void()>> contenders = {[&] {
          const Map a(a_stored.data<float>(), trans_a ? shape.k : shape.m, trans_a ? shape.m : shape.k);
          const Map b(b_stored.data<float>(), trans_b ? shape.n : shape.k, trans_b ? shape.k : shape.n);
          Map c(c32.data<float>(), shape.m, shape.n);
          if (trans_a && trans_b) c.noalias() = a.transpose() * b.transpose();
          else if (trans_a) c.noalias() = a.transpose() * b;
          else if (trans_b) c.noalias() = a * b.transpose();
          else c.noalias() = a * b;
        }};
#if LOOM_BENCH_HAVE_OPENBLAS
        names.push_back({"fp32", "openblas", "-"});
        contenders.emplace_back([&] {
          cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                      static_cast<int>(shape.m), static_cast<int>(shape.n), static_cast<int>(shape.k), 1.0f,
                      a_stored.data<float>(), static_cast<int>(lda), b_stored.data<float>(), static_cast<int>(ldb), 0.0f,
                      c32.data<float>(), static_cast<int>(shape.n));
        });
#endif
        std::vector<std::pair<loom::Tensor, loom::Tensor>> operands;
        operands.reserve(precision_names.size());
        for (const std::string& name : precision_names) {
          const loom::kernels::GemmPrecision precision = loom::kernels::parse_gemm_precision(name);
          const loom::DType input = loom::kernels::input_dtype(precision);
          operands.emplace_back(cast_to(a_stored, input), cast_to(b_stored, input));
          loom::kernels::GemmOptions options;
          options.precision = precision;
          options.trans_a = trans_a;
          options.trans_b = trans_b;
          names.push_back({name, "loom", active_isa});
          contenders.emplace_back([&, options, i = operands.size() - 1] {
            loom::kernels::gemm(operands[i].first, operands[i].second, c32, options);
          });
        }
        // loom's fp32 engine with the other variants (what kernels::gemm runs for fp32, with another table).
        for (const loom::kernels::CpuIsa isa : other_isas) {
          names.push_back({"fp32", "loom", std::string(loom::kernels::to_string(isa))});
          contenders.emplace_back([&, isa] {
            loom::kernels::cpu::sgemm(shape.m, shape.n, shape.k, lhs, rhs, c32.data<float>(), shape.n,
                                      omp_get_max_threads(), loom::kernels::cpu::cpu_kernels(isa));
          });
        }
        // The same engine with other cache blockings (the bits do not change; only the time can).
        for (const loom::kernels::CpuIsa isa : supported_shown_isas(other_isas)) {
          for (const BlockingSpec& spec : blockings) {
            const loom::kernels::cpu::SgemmBlocking blocking = blocking_for(spec, isa);
            names.push_back({"fp32", "loom", std::string(loom::kernels::to_string(isa)) + " " + spec.text});
            contenders.emplace_back([&, isa, blocking] {
              loom::kernels::cpu::sgemm_blocked(blocking, shape.m, shape.n, shape.k, lhs, rhs, c32.data<float>(), shape.n,
                                                omp_get_max_threads(), loom::kernels::cpu::cpu_kernels(isa));
            });
          }
        }
        const std::vector<double> seconds =
            loom::bench::interleaved_median_seconds(contenders, repeats, std::chrono::milliseconds(pause_ms));
#if LOOM_BENCH_HAVE_OPENBLAS
        const double openblas = seconds[1];
#else
        const double openblas = 0.0;
#endif
        for (std::size_t i = 0; i < seconds.size(); ++i) {
          report(row_name, names[i].precision, names[i].backend, seconds[i], seconds[0], openblas, names[i].isa, -1.0,
                 layout);
        }
      }
    }
    if (!json_path.empty()) loom::bench::write_json(json_path, record);
    return 0;
  } catch (const loom::Error& error) {
    std::fprintf(stderr, "%s\n", error.what());
    return 1;
  }
}
