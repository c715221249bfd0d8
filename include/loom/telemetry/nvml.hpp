// GPU sampling through NVML, loaded at run time with dlopen (build machines have no nvml.h; the
// few functions and structures used are declared in src/telemetry/nvml.cpp). Nvml::load finds
// libnvidia-ml.so.1 (or the library LOOM_NVML_LIBRARY names: the tests' fake); where it is missing
// the reason comes back and the caller says so once and carries on. GpuSampler reads one device on
// a background thread at a set interval: utilisation, memory, power, SM clock, temperature,
// throttle reasons, PCIe and NVLink throughput; a value the device does not report stays empty.
//
// NVML numbers every GPU of the host, whatever CUDA_VISIBLE_DEVICES says, while CUDA numbers only
// the visible ones, in the order that variable gives: a CUDA ordinal is not an NVML index. So loom
// never guesses one from the other and never walks NVML's device list: Nvml::resolve finds the one
// device a CUDA device is, by its UUID (or its PCI bus id, checked against the UUID), and refuses,
// naming both, when NVML has no such device.
//
// MIG: when the CUDA device is a MIG instance (its UUID is a MIG device's, found among the MIG
// devices of the GPU at its bus id), the sampler reads the MIG device handle and nothing else:
// NVML reports memory per instance, but no utilisation (not per instance, nor for a GPU in MIG
// mode), and power, clocks, temperature, PCIe and NVLink only for the whole GPU, which other
// tenants share; those stay empty rather than describe other jobs' work.
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

// The NVML device that is a CUDA device: a whole GPU, or a MIG instance on one.
struct NvmlDevice {
  unsigned index = 0;           // NVML's index of the GPU (for a MIG instance: of its parent GPU)
  std::optional<unsigned> mig;  // for a MIG instance: its MIG device index on that GPU
  std::string uuid;             // "GPU-..." or "MIG-..." as NVML reports it; "" when NVML reports none
  std::string parent_uuid;      // for a MIG instance: its GPU's "GPU-..."

  bool is_mig() const { return mig.has_value(); }
  // "NVML device 1" or "NVML device 1, MIG device 1".
  std::string describe() const;
};

class Nvml {
 public:
  // The library, initialised; null with *why_not set when it cannot be loaded or initialised.
  static std::shared_ptr<Nvml> load(std::string* why_not);
  ~Nvml();
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  unsigned device_count() const;
  // The NVML index of the GPU with this PCI bus id ("0000:07:00.0"); a cuda Error naming it when none.
  unsigned index_of_bus(const std::string& pci_bus_id) const;
  // The NVML index of the whole GPU with this UUID ("GPU-..."); a cuda Error naming it when none,
  // or when this NVML cannot look devices up by UUID.
  unsigned index_of_uuid(const std::string& uuid) const;
  // GPU `index`'s UUID ("GPU-..."); a cuda Error when NVML reports none.
  std::string uuid(unsigned index) const;
  // The NVML device that is the CUDA device with this UUID (CudaDeviceProperties::uuid: with or
  // without a "GPU-"/"MIG-" prefix) and PCI bus id. Touches no other GPU: the UUID first, then the
  // GPU at the bus id (itself, or one of its MIG devices). A cuda Error naming the UUID, the bus id
  // and what NVML has there when no device matches; an empty uuid matches by bus id alone.
  NvmlDevice resolve(const std::string& cuda_uuid, const std::string& pci_bus_id) const;
  // Whether this NVML offers the MIG calls (a driver before R450 does not: no MIG device is found).
  bool reports_mig() const;
  std::string name(unsigned index) const;
  std::string name(const NvmlDevice& device) const;  // a MIG device's own name ("... MIG 1g.10gb")
  // One reading (NVLink counters are cumulative: GpuSampler turns them into rates).
  GpuSample read(unsigned index, std::optional<std::uint64_t>* nvlink_tx_kib = nullptr,
                 std::optional<std::uint64_t>* nvlink_rx_kib = nullptr) const;
  GpuSample read(const NvmlDevice& device, std::optional<std::uint64_t>* nvlink_tx_kib = nullptr,
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
  // Starts sampling the device every `interval` (the first reading at once).
  GpuSampler(std::shared_ptr<Nvml> nvml, NvmlDevice device, std::chrono::milliseconds interval);
  GpuSampler(std::shared_ptr<Nvml> nvml, unsigned index, std::chrono::milliseconds interval);
  ~GpuSampler();  // stops the thread
  GpuSampler(const GpuSampler&) = delete;
  GpuSampler& operator=(const GpuSampler&) = delete;

  std::optional<GpuSample> latest() const;
  std::vector<GpuSample> samples() const;
  unsigned index() const { return device_.index; }
  const NvmlDevice& device() const { return device_; }
  const Nvml& nvml() const { return *nvml_; }

 private:
  void run();
  std::shared_ptr<Nvml> nvml_;
  NvmlDevice device_;
  std::chrono::milliseconds interval_;
  mutable std::mutex mutex_;
  std::condition_variable stop_changed_;
  bool stop_ = false;
  std::vector<GpuSample> samples_;
  std::thread thread_;
};

}  // namespace loom::telemetry
