// alloc_bench: what the caching allocator saves per allocate+free pair, against the direct
// allocator measured in the same run (aligned operator new on the CPU, cudaMalloc/cudaFree on a
// GPU), for sizes a training step allocates. Prints a table; --json writes the record.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench_report.hpp"
#include "loom/loom.hpp"

namespace {

// Median over repeats of the mean time of one allocate+free pair, in microseconds.
double time_pairs(loom::Allocator& allocator, std::size_t bytes, int iterations, int repeats) {
  std::vector<double> samples;
  void* warm = allocator.allocate(bytes, {});  // first use: fills the cache, initializes the device
  allocator.deallocate(warm);
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iterations; ++i) allocator.deallocate(allocator.allocate(bytes, {}));
    const std::chrono::duration<double, std::micro> elapsed = std::chrono::steady_clock::now() - start;
    samples.push_back(elapsed.count() / iterations);
  }
  return loom::bench::median(samples);
}

std::shared_ptr<loom::CachingAllocator> caching_for(loom::Device device);

// The CPU's backing for the caching allocator: the same aligned operator new as the baseline.
class CpuBacking final : public loom::BackingAllocator {
 public:
  loom::Device device() const noexcept override { return loom::Device::cpu(); }
  void* allocate(std::size_t bytes) override {
    try {
      return loom::cpu_allocator()->allocate(bytes, {});
    } catch (const loom::Error& error) {
      if (error.category() == loom::ErrorCategory::out_of_memory) return nullptr;  // the backing contract
      throw;
    }
  }
  void deallocate(void* ptr) noexcept override { loom::cpu_allocator()->deallocate(ptr); }
};

std::shared_ptr<loom::CachingAllocator> caching_for(loom::Device device) {
  if (device.is_cuda()) return loom::make_cuda_caching_allocator(device.index());
  return std::make_shared<loom::CachingAllocator>(std::make_unique<CpuBacking>());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("alloc_bench: caching vs direct allocation, allocate+free pairs");
  std::string device_name = "auto", json_path;
  std::vector<std::size_t> sizes = {4 << 10, 1 << 20, 16 << 20, 256 << 20};
  int iterations = 200, repeats = 7;
  app.add_option("--device", device_name, "cpu, cuda:N or auto");
  app.add_option("--sizes", sizes, "allocation sizes in bytes")->delimiter(',');
  app.add_option("--iterations", iterations, "pairs per timed repeat")->check(CLI::PositiveNumber);
  app.add_option("--repeats", repeats, "timed repeats (the median is reported)")->check(CLI::PositiveNumber);
  app.add_option("--json", json_path, "write the JSON record here");
  CLI11_PARSE(app, argc, argv);

  try {
    const bool gpu = loom::cuda_runtime_status().available();
    const loom::Device device = device_name == "auto" ? (gpu ? loom::Device::cuda(0) : loom::Device::cpu())
                                                      : loom::Device::parse(device_name);
    auto direct = loom::default_allocator(device);
    auto caching = caching_for(device);
    nlohmann::json record = loom::bench::make_record(
        "alloc_bench", {{"device", device.to_string()}, {"iterations", iterations}, {"repeats", repeats}});

    std::printf("%s\nallocate+free pair, median of %d repeats x %d pairs, on %s\n\n",
                loom::to_string(loom::build_info()).c_str(), repeats, iterations, device.to_string().c_str());
    std::printf("%12s %14s %14s %9s\n", "bytes", "direct_us", "caching_us", "speedup");
    for (std::size_t bytes : sizes) {
      const double direct_us = time_pairs(*direct, bytes, iterations, repeats);
      const double caching_us = time_pairs(*caching, bytes, iterations, repeats);
      std::printf("%12zu %14.3f %14.3f %8.1fx\n", bytes, direct_us, caching_us, direct_us / caching_us);
      record["rows"].push_back({{"bytes", bytes}, {"direct_us", direct_us}, {"caching_us", caching_us},
                                {"speedup", direct_us / caching_us}});
    }
    if (!json_path.empty()) loom::bench::write_json(json_path, record);
    return 0;
  } catch (const loom::Error& error) {
    std::fprintf(stderr, "%s\n", error.what());
    return 1;
  }
}
