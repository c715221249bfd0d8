// GPU sampling through NVML, loaded at run time with dlopen (build machines have no nvml.h; the
// few functions and structures used are declared in src/telemetry/nvml.cpp). Nvml::load finds
// libnvidia-ml.so.1 (or the library LOOM_NVML_LIBRARY names: the tests' fake); where it is missing
// the reason comes back and the caller says so once and carries on. GpuSampler reads one device on
// a background thread at a set interval: utilisation, memory, power, SM clock, temperature,
// throttle reasons, PCIe and NVLink throughput; a value the device does not report stays empty.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace loom::telemetry {

struct GpuSample {
  double seconds = 0;  // since the sampler started
  std::optional<unsigned> utilization_percent, memory_utilization_percent;
  std::optional<std::uint64_t> memory_used_bytes, memory_total_bytes;
  std::optional<double> power_watts;
  std::optional<unsigned> sm_clock_mhz, temperature_c;
  std::optional<std::uint64_t> throttle_reasons;  // NVML's bit mask (0: not throttled)
  std::optional<double> pcie_tx_bytes_per_second, pcie_rx_bytes_per_second;
  std::optional<double> nvlink_tx_bytes_per_second, nvlink_rx_bytes_per_second;  // since the previous sample
};

class Nvml {
 public:
  // The library, initialised; null with *why_not set when it cannot be loaded or initialised.
  static std::shared_ptr<Nvml> load(std::string* why_not);
  ~Nvml();
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  unsigned device_count() const;
  // The NVML index of the device with this PCI bus id ("0000:07:00.0"), or of `index` directly.
  unsigned index_of_bus(const std::string& pci_bus_id) const;
  std::string name(unsigned index) const;
  // One reading (NVLink counters are cumulative: GpuSampler turns them into rates).
  GpuSample read(unsigned index, std::optional<std::uint64_t>* nvlink_tx_kib = nullptr,
                 std::optional<std::uint64_t>* nvlink_rx_kib = nullptr) const;
  const std::string& library() const { return library_; }

  struct Api;  // the resolved functions

 private:
  Nvml(void* handle, std::string library, std::unique_ptr<Api> api);
  void* handle_;
  std::string library_;
  std::unique_ptr<Api> api_;
};

// Mean, 95th percentile and extremes over a sampler's readings.
struct GpuSummary {
  std::size_t samples = 0;
  double utilization_mean = 0, utilization_p95 = 0;
  std::uint64_t memory_used_max = 0, memory_total = 0;
  double power_mean_watts = 0, power_max_watts = 0;
  unsigned sm_clock_min_mhz = 0, temperature_max_c = 0;
  std::size_t throttled_samples = 0;  // readings with a throttle reason set
};
GpuSummary summarize(const std::vector<GpuSample>& samples);

class GpuSampler {
 public:
  // Starts sampling NVML device `index` every `interval` (the first reading at once).
  GpuSampler(std::shared_ptr<Nvml> nvml, unsigned index, std::chrono::milliseconds interval);
  ~GpuSampler();  // stops the thread
  GpuSampler(const GpuSampler&) = delete;
  GpuSampler& operator=(const GpuSampler&) = delete;

  std::optional<GpuSample> latest() const;
  std::vector<GpuSample> samples() const;
  unsigned index() const { return index_; }
  const Nvml& nvml() const { return *nvml_; }

 private:
  void run();
  std::shared_ptr<Nvml> nvml_;
  unsigned index_;
  std::chrono::milliseconds interval_;
  mutable std::mutex mutex_;
  std::condition_variable stop_changed_;
  bool stop_ = false;
  std::vector<GpuSample> samples_;
  std::thread thread_;
};

}  // namespace loom::telemetry
