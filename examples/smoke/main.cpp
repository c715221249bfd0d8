// loom_smoke: an end-to-end check of a loom build on this machine. It reports what the build
// contains and what the machine offers, then exercises the core on the CPU and, where there is a
// GPU, on the GPU. Exit status 0 only if every check that ran passed.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "loom/kernels/cpu_isa.hpp"
#include "loom/kernels/gemm.hpp"
#include "loom/loom.hpp"

namespace {

struct Outcome {
  enum class Kind { ok, skipped, failed } kind;
  std::string detail;
};

Outcome ok(std::string detail = {}) { return {Outcome::Kind::ok, std::move(detail)}; }
Outcome skipped(std::string why) { return {Outcome::Kind::skipped, std::move(why)}; }
Outcome failed(std::string why) { return {Outcome::Kind::failed, std::move(why)}; }

Outcome check_conversions() {
  int mismatches = 0;
  for (std::uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const auto b = static_cast<std::uint16_t>(bits);
    const bool f16_nan = (b & 0x7c00) == 0x7c00 && (b & 0x3ff);
    const bool bf16_nan = (b & 0x7f80) == 0x7f80 && (b & 0x7f);
    if (!f16_nan && loom::float_to_half_bits(loom::half_bits_to_float(b)) != b) ++mismatches;
    if (!bf16_nan && loom::float_to_bf16_bits(loom::bf16_bits_to_float(b)) != b) ++mismatches;
  }
  if (mismatches != 0) return failed(std::to_string(mismatches) + " patterns did not round-trip");
  return ok("all 65,536 f16 and bf16 patterns round-trip");
}

Outcome check_views() {
  const loom::Tensor t = loom::Tensor::zeros({8, 4}, loom::DType::f32);
  const loom::Tensor param = t.flatten().slice(4, 12).view({2, 4});
  loom::fill(param, 2.0);
  float sum = 0;
  for (float v : t.span<float>()) sum += v;
  if (sum != 16.0f || !param.shares_storage_with(t)) return failed("a view did not write through to its storage");
  return ok("views share storage and write through");
}

Outcome check_caching_allocator(loom::Device device) {
  if (!device.is_cuda()) return skipped("needs a CUDA device (the CPU path is covered by the unit tests)");
  auto allocator = loom::make_cuda_caching_allocator(device.index());
  for (int step = 0; step < 10; ++step) {
    const loom::Tensor activations = loom::Tensor::empty({1 << 20}, loom::DType::bf16, allocator);
    loom::fill(activations, step);
  }
  const loom::AllocatorStats stats = allocator->stats();
  if (stats.backing_allocation_count != 1 || stats.cache_hit_count != 9) {
    return failed("expected 1 cudaMalloc and 9 cache hits, got " + std::to_string(stats.backing_allocation_count) +
                  " and " + std::to_string(stats.cache_hit_count));
  }
  return ok("10 allocations, 1 cudaMalloc, 9 cache hits");
}

Outcome check_copy(loom::Device device, std::int64_t mib) {
  const std::int64_t n = mib * (1 << 20) / 4;
  const loom::Tensor host = loom::Tensor::empty({n}, loom::DType::f32);
  auto values = host.span<float>();
  for (std::int64_t i = 0; i < n; ++i) values[static_cast<std::size_t>(i)] = static_cast<float>(i % 1000);
  const auto start = std::chrono::steady_clock::now();
  const loom::Tensor there = host.to(device).clone();
  const loom::Tensor back = there.to(loom::Device::cpu());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (back.as_bytes().to_vector<std::uint8_t>() != host.as_bytes().to_vector<std::uint8_t>()) {
    return failed("data changed on the way");
  }
  const double gbytes = 3.0 * static_cast<double>(host.nbytes()) / 1e9;  // there, clone, back
  char detail[128];
  std::snprintf(detail, sizeof(detail), "%lld MiB cpu -> %s -> cpu intact, %.1f GB/s moved",
                static_cast<long long>(mib), device.to_string().c_str(), gbytes / seconds);
  return ok(detail);
}

// The CPU kernel variant this process runs, on a GEMM with ragged edges against a direct double sum.
Outcome check_cpu_kernels() {
  const std::int64_t m = 67, n = 45, k = 33;
  const loom::Tensor a = loom::Tensor::empty({m, k}, loom::DType::f32), b = loom::Tensor::empty({k, n}, loom::DType::f32);
  const loom::Tensor c = loom::Tensor::empty({m, n}, loom::DType::f32);
  for (std::int64_t i = 0; i < m * k; ++i) a.data<float>()[i] = static_cast<float>((i * 7) % 13) - 6.0f;
  for (std::int64_t i = 0; i < k * n; ++i) b.data<float>()[i] = static_cast<float>((i * 5) % 11) - 5.0f;
  loom::kernels::gemm(a, b, c);
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      double exact = 0;  // small integers: every partial sum is exact in fp32
      for (std::int64_t p = 0; p < k; ++p) exact += a.data<float>()[i * k + p] * static_cast<double>(b.data<float>()[p * n + j]);
      if (c.data<float>()[i * n + j] != exact) return failed("GEMM element (" + std::to_string(i) + ", " + std::to_string(j) + ") is wrong");
    }
  }
  std::string supported;
  for (loom::kernels::CpuIsa isa : loom::kernels::supported_cpu_isas()) {
    supported += (supported.empty() ? "" : ", ") + std::string(to_string(isa));
  }
  return ok(std::string(to_string(loom::kernels::active_cpu_isa())) + " (this CPU: " + supported + "); a " +
            std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) + " GEMM is exact");
}

Outcome check_errors() {
  try {
    (void)loom::Tensor::empty({2, 3}, loom::DType::f32).view({4, 2});
    return failed("an impossible view was accepted");
  } catch (const loom::Error& error) {
    if (error.category() != loom::ErrorCategory::invalid_argument) return failed("wrong error category");
    return ok(std::string("e.g. \"") + error.detail() + "\"");
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("loom_smoke: checks this loom build end to end on this machine");
  std::string device_name = "auto";
  std::int64_t mib = 64;
  app.add_option("--device", device_name, "cpu, cuda, cuda:N or auto (a GPU when there is one)");
  app.add_option("--mib", mib, "size of the copy check in MiB")->check(CLI::Range(1, 1 << 16));
  CLI11_PARSE(app, argc, argv);

  try {
    const loom::CudaRuntimeStatus cuda = loom::cuda_runtime_status();
    const loom::Device device = device_name == "auto"
                                    ? (cuda.available() ? loom::Device::cuda(0) : loom::Device::cpu())
                                    : loom::Device::parse(device_name);
    std::printf("%s\n", loom::to_string(loom::build_info()).c_str());
    if (cuda.available()) {
      for (int i = 0; i < cuda.device_count; ++i) {
        const loom::CudaDeviceProperties p = loom::cuda_device_properties(i);
        std::printf("GPU %d: %s, sm_%d%d, %.1f GiB\n", i, p.name.c_str(), p.compute_major, p.compute_minor,
                    static_cast<double>(p.total_memory_bytes) / (1 << 30));
      }
    } else {
      std::printf("GPU: none usable (%s)\n", cuda.reason.c_str());
    }
    std::printf("device under test: %s\n\n", device.to_string().c_str());

    const std::vector<std::pair<std::string, std::function<Outcome()>>> checks = {
        {"f16/bf16 conversions", check_conversions},
        {"tensor views and slices", check_views},
        {"errors name the problem", check_errors},
        {"CPU kernels", check_cpu_kernels},
        {"caching allocator", [&] { return check_caching_allocator(device); }},
        {"copy round trip", [&] { return check_copy(device, mib); }},
    };
    int passed = 0, skipped_count = 0, failed_count = 0;
    std::printf("%-26s %-8s %s\n", "check", "result", "detail");
    for (const auto& [name, run] : checks) {
      Outcome outcome;
      try {
        outcome = run();
      } catch (const loom::Error& error) {
        outcome = failed(error.what());
      }
      const char* result = outcome.kind == Outcome::Kind::ok ? "ok" : outcome.kind == Outcome::Kind::skipped ? "skipped" : "FAILED";
      (outcome.kind == Outcome::Kind::ok ? passed : outcome.kind == Outcome::Kind::skipped ? skipped_count : failed_count)++;
      std::printf("%-26s %-8s %s\n", name.c_str(), result, outcome.detail.c_str());
    }
    std::printf("\nsmoke test %s: %d passed, %d failed, %d skipped\n", failed_count == 0 ? "passed" : "FAILED", passed,
                failed_count, skipped_count);
    return failed_count == 0 ? 0 : 1;
  } catch (const loom::Error& error) {
    std::fprintf(stderr, "%s\n", error.what());
    return 2;
  }
}
