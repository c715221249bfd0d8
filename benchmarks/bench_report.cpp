#include "bench_report.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "build_commit.hpp"  // generated at build time: LOOM_BUILD_COMMIT
#include "loom/core/build_info.hpp"
#include "loom/core/error.hpp"
#include "loom/core/gpu_info.hpp"
#include "loom/kernels/cast.hpp"
#include "kernels/cpu/sgemm_blocking.hpp"
#include "loom/kernels/cpu_caches.hpp"
#include "loom/kernels/cpu_isa.hpp"

namespace loom::bench {

Device bench_device(const std::string& name) {
  if (name != "auto") return Device::parse(name);
  return cuda_runtime_status().available() ? Device::cuda(0) : Device::cpu();
}

Tensor random_tensor(const Shape& shape, DType dtype, Device device, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const Tensor f32 = Tensor::empty(shape, DType::f32);
  for (float& v : f32.span<float>()) v = dist(rng);
  const Tensor out = Tensor::empty(shape, dtype);
  kernels::cast(f32, out);
  return out.to(device);
}

double median(std::vector<double> samples) {
  require(!samples.empty(), "median of no samples");
  std::sort(samples.begin(), samples.end());
  const std::size_t mid = samples.size() / 2;
  return samples.size() % 2 ? samples[mid] : (samples[mid - 1] + samples[mid]) / 2;
}

double median_seconds(const std::function<void()>& fn, int repeats, const Stream& stream) {
  fn();
  stream.synchronize();
  Event start(stream.device(), true), end(stream.device(), true);
  std::vector<double> samples;
  for (int r = 0; r < repeats; ++r) {
    start.record(stream);
    fn();
    end.record(stream);
    end.synchronize();
    samples.push_back(start.elapsed_ms(end) / 1e3);
  }
  return median(samples);
}

std::vector<double> interleaved_median_seconds(const std::vector<std::function<void()>>& contenders, int repeats,
                                               std::chrono::milliseconds pause) {
  for (const auto& fn : contenders) fn();
  std::vector<std::vector<double>> samples(contenders.size());
  for (int r = 0; r < repeats; ++r) {
    for (std::size_t i = 0; i < contenders.size(); ++i) {
      std::this_thread::sleep_for(pause);
      // One untimed call first: the pause put this contender's worker threads to sleep too, and on a
      // virtual machine an idle core can take ~10 ms to wake, which one call of a few ms would
      // measure instead of the GEMM.
      contenders[i]();
      const auto start = std::chrono::steady_clock::now();
      contenders[i]();
      samples[i].push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
  }
  std::vector<double> medians;
  for (auto& s : samples) medians.push_back(median(std::move(s)));
  return medians;
}

namespace {

// The CPU as /proc/cpuinfo names it: "model name (vendor, family F, model M)" ("unknown" elsewhere);
// virtual machines often report only a generic model name, which the family and model pin down.
std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, name = "unknown", vendor, family, model;
  auto value = [&line] {
    const auto colon = line.find(':');
    return colon == std::string::npos ? std::string() : line.substr(std::min(line.size(), colon + 2));
  };
  while (std::getline(in, line) && !line.empty()) {
    if (line.rfind("model name", 0) == 0) name = value();
    else if (line.rfind("vendor_id", 0) == 0) vendor = value();
    else if (line.rfind("cpu family", 0) == 0) family = value();
    else if (line.rfind("model\t", 0) == 0) model = value();
  }
  if (vendor.empty()) return name;
  return name + " (" + vendor + ", family " + family + ", model " + model + ")";
}

}  // namespace

nlohmann::json cpu_description() {
  nlohmann::json supported = nlohmann::json::array(), blocking = nlohmann::json::object();
  for (kernels::CpuIsa isa : kernels::supported_cpu_isas()) {
    supported.push_back(kernels::to_string(isa));
    const auto& tile = kernels::cpu::cpu_kernels(isa).sgemm;
    const kernels::cpu::SgemmBlocking& b = kernels::cpu::sgemm_blocking(kernels::cpu::cpu_kernels(isa));
    blocking[std::string(kernels::to_string(isa))] = {{"mr", tile.mr}, {"nr", tile.nr}, {"mc", b.mc}, {"nc", b.nc},
                                                      {"kc", b.kc}, {"a_in_place", b.a_in_place},
                                                      {"l1", kernels::cpu::to_string(b.l1)}, {"wide_n", b.wide_n},
                                                      {"wide_nc", b.wide_nc}, {"wide_mc", b.wide_mc}};
  }
  const kernels::CpuCaches& caches = kernels::cpu_caches();
  auto level = [](const kernels::CpuCache& c) {
    return nlohmann::json{{"bytes", c.bytes}, {"ways", c.ways}, {"shared_by", c.shared_by}};
  };
  return {{"model", cpu_model()},
          {"kernels", kernels::to_string(kernels::active_cpu_isa())},
          {"supported", supported},
          {"caches", {{"l1d", level(caches.l1d)}, {"l2", level(caches.l2)}, {"l3", level(caches.l3)},
                      {"source", caches.source}, {"text", kernels::describe(caches)}}},
          {"gemm_blocking", blocking}};
}

std::string gemm_blocking_text(kernels::CpuIsa isa) {
  const kernels::cpu::CpuKernels& table = kernels::cpu::cpu_kernels(isa);
  return std::string(kernels::to_string(isa)) + " " + kernels::cpu::describe(kernels::cpu::sgemm_blocking(table), table.sgemm);
}

nlohmann::json make_record(const std::string& benchmark, const nlohmann::json& config) {
  const char* commit = std::getenv("LOOM_COMMIT");
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  nlohmann::json gpus = nlohmann::json::array();
  const CudaRuntimeStatus cuda = cuda_runtime_status();
  for (int i = 0; i < cuda.device_count; ++i) {
    const CudaDeviceProperties p = cuda_device_properties(i);
    gpus.push_back({{"name", p.name}, {"sm", p.compute_major * 10 + p.compute_minor},
                    {"memory_bytes", p.total_memory_bytes}});
  }
  return {{"benchmark", benchmark},
          {"commit", commit != nullptr ? commit : LOOM_BUILD_COMMIT},
          {"machine", {{"host", host}, {"cpus", std::thread::hardware_concurrency()}, {"cpu", cpu_description()},
                       {"gpus", gpus},
                       {"build", to_string(build_info())}}},
          {"config", config},
          {"rows", nlohmann::json::array()}};
}

void write_json(const std::string& path, const nlohmann::json& record) {
  std::ofstream out(path);
  if (!out) fail(ErrorCategory::io, "cannot open '", path, "' for writing");
  out << record.dump(2) << '\n';
  if (!out) fail(ErrorCategory::io, "cannot write '", path, "'");
}

}  // namespace loom::bench
