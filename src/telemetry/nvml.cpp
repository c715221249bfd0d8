#include "loom/telemetry/nvml.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <type_traits>

#include "loom/core/error.hpp"
#include "loom/core/visible_devices.hpp"

namespace loom::telemetry {

namespace {

// NVML's ABI as documented in nvml.h (which build machines lack): the types and codes used here.
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
constexpr nvmlReturn_t nvml_success = 0;
constexpr unsigned nvml_mig_enabled = 1;       // NVML_DEVICE_MIG_ENABLE
constexpr unsigned nvml_uuid_buffer_size = 96;  // NVML_DEVICE_UUID_V2_BUFFER_SIZE
struct nvmlUtilization_t {
  unsigned gpu, memory;
};
struct nvmlMemory_t {
  unsigned long long total, free, used;
};
struct nvmlFieldValue_t {
  unsigned fieldId, scopeId;
  long long timestamp, latencyUsec;
  int valueType;
  nvmlReturn_t nvmlReturn;
  union {
    double d;
    unsigned ui;
    unsigned long ul;
    unsigned long long ull;
    long long sll;
  } value;
};
constexpr int nvml_clock_sm = 1, nvml_temperature_gpu = 0, nvml_pcie_tx = 0, nvml_pcie_rx = 1;
constexpr unsigned nvml_fi_nvlink_data_tx = 138, nvml_fi_nvlink_data_rx = 139;  // KiB, cumulative, all links
constexpr unsigned nvml_all_links = UINT_MAX;

}  // namespace

struct Nvml::Api {
  nvmlReturn_t (*init)();
  nvmlReturn_t (*shutdown)();
  const char* (*error_string)(nvmlReturn_t);
  nvmlReturn_t (*count)(unsigned*);
  nvmlReturn_t (*by_index)(unsigned, nvmlDevice_t*);
  nvmlReturn_t (*by_bus)(const char*, nvmlDevice_t*);
  nvmlReturn_t (*index)(nvmlDevice_t, unsigned*);
  nvmlReturn_t (*name)(nvmlDevice_t, char*, unsigned);
  nvmlReturn_t (*utilization)(nvmlDevice_t, nvmlUtilization_t*);
  nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t*);
  nvmlReturn_t (*power)(nvmlDevice_t, unsigned*);
  nvmlReturn_t (*clock)(nvmlDevice_t, int, unsigned*);
  nvmlReturn_t (*temperature)(nvmlDevice_t, int, unsigned*);
  nvmlReturn_t (*throttle)(nvmlDevice_t, unsigned long long*);  // optional
  nvmlReturn_t (*pcie)(nvmlDevice_t, int, unsigned*);            // optional
  nvmlReturn_t (*fields)(nvmlDevice_t, int, nvmlFieldValue_t*);  // optional
  nvmlReturn_t (*uuid)(nvmlDevice_t, char*, unsigned);            // optional: identity by bus id alone
  nvmlReturn_t (*by_uuid)(const char*, nvmlDevice_t*);            // optional
  // MIG (R450 and later), all optional: without them no MIG device is found.
  nvmlReturn_t (*mig_mode)(nvmlDevice_t, unsigned*, unsigned*);
  nvmlReturn_t (*max_mig_devices)(nvmlDevice_t, unsigned*);
  nvmlReturn_t (*mig_by_index)(nvmlDevice_t, unsigned, nvmlDevice_t*);
  nvmlReturn_t (*parent_of_mig)(nvmlDevice_t, nvmlDevice_t*);

  std::string error(nvmlReturn_t code) const {
    return std::string(error_string != nullptr ? error_string(code) : "unknown error") + " (" + std::to_string(code) + ")";
  }
};

std::shared_ptr<Nvml> Nvml::load(std::string* why_not) {
  const char* named = std::getenv("LOOM_NVML_LIBRARY");
  const std::string library = named != nullptr && *named != '\0' ? named : "libnvidia-ml.so.1";
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* error = dlerror();
    *why_not = "NVML not loaded (" + library + ": " + (error != nullptr ? error : "not found") + ")";
    return nullptr;
  }
  auto api = std::make_unique<Api>();
  bool missing = false;
  std::string missing_name;
  const auto resolve = [&](auto& fn, std::initializer_list<const char*> names, bool required) {
    for (const char* name : names) {
      if (void* symbol = dlsym(handle, name)) {
        fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(symbol);
        return;
      }
    }
    fn = nullptr;
    if (required && !missing) {
      missing = true;
      missing_name = *names.begin();
    }
  };
  resolve(api->init, {"nvmlInit_v2", "nvmlInit"}, true);
  resolve(api->shutdown, {"nvmlShutdown"}, true);
  resolve(api->error_string, {"nvmlErrorString"}, false);
  resolve(api->count, {"nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"}, true);
  resolve(api->by_index, {"nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"}, true);
  resolve(api->by_bus, {"nvmlDeviceGetHandleByPciBusId_v2", "nvmlDeviceGetHandleByPciBusId"}, true);
  resolve(api->index, {"nvmlDeviceGetIndex"}, true);
  resolve(api->name, {"nvmlDeviceGetName"}, true);
  resolve(api->utilization, {"nvmlDeviceGetUtilizationRates"}, true);
  resolve(api->memory, {"nvmlDeviceGetMemoryInfo"}, true);
  resolve(api->power, {"nvmlDeviceGetPowerUsage"}, true);
  resolve(api->clock, {"nvmlDeviceGetClockInfo"}, true);
  resolve(api->temperature, {"nvmlDeviceGetTemperature"}, true);
  resolve(api->throttle, {"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"}, false);
  resolve(api->pcie, {"nvmlDeviceGetPcieThroughput"}, false);
  resolve(api->fields, {"nvmlDeviceGetFieldValues"}, false);
  resolve(api->uuid, {"nvmlDeviceGetUUID"}, false);
  resolve(api->by_uuid, {"nvmlDeviceGetHandleByUUID"}, false);
  resolve(api->mig_mode, {"nvmlDeviceGetMigMode"}, false);
  resolve(api->max_mig_devices, {"nvmlDeviceGetMaxMigDeviceCount"}, false);
  resolve(api->mig_by_index, {"nvmlDeviceGetMigDeviceHandleByIndex"}, false);
  resolve(api->parent_of_mig, {"nvmlDeviceGetDeviceHandleFromMigDeviceHandle"}, false);
  if (missing) {
    *why_not = "NVML not used (" + library + " has no " + missing_name + ")";
    dlclose(handle);
    return nullptr;
  }
  if (const nvmlReturn_t code = api->init(); code != nvml_success) {
    *why_not = "NVML not initialised (" + library + ": nvmlInit_v2 returned " + api->error(code) + ")";
    dlclose(handle);
    return nullptr;
  }
  return std::shared_ptr<Nvml>(new Nvml(handle, library, std::move(api)));
}

Nvml::Nvml(void* handle, std::string library, std::unique_ptr<Api> api)
    : handle_(handle), library_(std::move(library)), api_(std::move(api)) {}

Nvml::~Nvml() {
  api_->shutdown();
  dlclose(handle_);
}

unsigned Nvml::device_count() const {
  unsigned count = 0;
  if (const nvmlReturn_t code = api_->count(&count); code != nvml_success) {
    fail(ErrorCategory::cuda, "NVML: nvmlDeviceGetCount failed: ", api_->error(code));
  }
  return count;
}

unsigned Nvml::index_of_bus(const std::string& pci_bus_id) const {
  nvmlDevice_t device = nullptr;
  unsigned index = 0;
  nvmlReturn_t code = api_->by_bus(pci_bus_id.c_str(), &device);
  if (code == nvml_success) code = api_->index(device, &index);
  if (code != nvml_success) fail(ErrorCategory::cuda, "NVML: no device at PCI bus id ", pci_bus_id, ": ", api_->error(code));
  return index;
}

namespace {

// The handle of a whole GPU or of a MIG device on one; a cuda Error naming the device when none.
nvmlDevice_t handle_of(const Nvml::Api& api, const NvmlDevice& d) {
  nvmlDevice_t device = nullptr;
  nvmlReturn_t code = api.by_index(d.index, &device);
  if (code == nvml_success && d.mig) {
    nvmlDevice_t gpu = device;
    code = api.mig_by_index != nullptr ? api.mig_by_index(gpu, *d.mig, &device) : -1;
  }
  if (code != nvml_success) {
    fail(ErrorCategory::cuda, "NVML: ", d.describe(), ": ",
         code == -1 ? std::string("this NVML has no MIG calls") : api.error(code));
  }
  return device;
}

// The device's UUID, "" when this NVML reports none.
std::string uuid_of(const Nvml::Api& api, nvmlDevice_t device) {
  char uuid[nvml_uuid_buffer_size] = {};
  if (api.uuid == nullptr || api.uuid(device, uuid, sizeof uuid) != nvml_success) return "";
  return uuid;
}

bool in_mig_mode(const Nvml::Api& api, nvmlDevice_t device) {
  unsigned current = 0, pending = 0;
  return api.mig_mode != nullptr && api.mig_mode(device, &current, &pending) == nvml_success &&
         current == nvml_mig_enabled;
}

}  // namespace

std::string NvmlDevice::describe() const {
  std::string out = "NVML device " + std::to_string(index);
  if (mig) out += ", MIG device " + std::to_string(*mig);
  return out;
}

unsigned Nvml::index_of_uuid(const std::string& uuid) const {
  if (api_->by_uuid == nullptr) fail(ErrorCategory::cuda, "NVML: ", library_, " cannot look up ", uuid, " (no nvmlDeviceGetHandleByUUID)");
  nvmlDevice_t device = nullptr;
  unsigned index = 0;
  nvmlReturn_t code = api_->by_uuid(uuid.c_str(), &device);
  if (code == nvml_success) code = api_->index(device, &index);
  if (code != nvml_success) fail(ErrorCategory::cuda, "NVML: no GPU with UUID ", uuid, ": ", api_->error(code));
  return index;
}

std::string Nvml::uuid(unsigned index) const {
  const std::string uuid = uuid_of(*api_, handle_of(*api_, NvmlDevice{index, std::nullopt, "", ""}));
  if (uuid.empty()) fail(ErrorCategory::cuda, "NVML: device ", index, " reports no UUID");
  return uuid;
}

bool Nvml::reports_mig() const {
  return api_->mig_mode != nullptr && api_->max_mig_devices != nullptr && api_->mig_by_index != nullptr;
}

NvmlDevice Nvml::resolve(const std::string& cuda_uuid, const std::string& pci_bus_id) const {
  const std::string digits = uuid_digits(cuda_uuid);
  const std::string named = digits.empty() ? "no UUID" : "UUID " + digits;
  // A GPU in MIG mode runs no CUDA work itself: CUDA naming one means it reported the GPU's UUID
  // for one of its instances (an old cuDeviceGetUuid), and which one cannot be told.
  const auto whole = [&](nvmlDevice_t device, unsigned index, std::string uuid) {
    if (in_mig_mode(*api_, device)) {
      fail(ErrorCategory::cuda, "NVML: the CUDA device with ", named, " is GPU ", uuid,
           ", which is in MIG mode: cannot tell which of its MIG instances this process uses");
    }
    return NvmlDevice{index, std::nullopt, std::move(uuid), ""};
  };
  nvmlDevice_t device = nullptr;
  unsigned index = 0;
  if (!digits.empty() && api_->by_uuid != nullptr && api_->by_uuid(("GPU-" + digits).c_str(), &device) == nvml_success &&
      api_->index(device, &index) == nvml_success) {
    return whole(device, index, "GPU-" + digits);
  }
  // Not a whole GPU NVML knows by that UUID: the GPU at the bus id, or one of its MIG devices.
  nvmlReturn_t code = api_->by_bus(pci_bus_id.c_str(), &device);
  if (code == nvml_success) code = api_->index(device, &index);
  if (code != nvml_success) {
    fail(ErrorCategory::cuda, "NVML: no device is the CUDA device with ", named, " at PCI bus id ", pci_bus_id, " (",
         api_->error(code), ")");
  }
  const std::string gpu_uuid = uuid_of(*api_, device);
  if (digits.empty() || gpu_uuid.empty() || uuid_digits(gpu_uuid) == digits) return whole(device, index, gpu_uuid);
  const bool mig = reports_mig() && in_mig_mode(*api_, device);
  if (unsigned slots = 0; mig && api_->max_mig_devices(device, &slots) == nvml_success) {
    for (unsigned slot = 0; slot < slots; ++slot) {
      nvmlDevice_t instance = nullptr;
      if (api_->mig_by_index(device, slot, &instance) != nvml_success) continue;  // no instance there
      if (const std::string uuid = uuid_of(*api_, instance); uuid_digits(uuid) == digits) {
        return NvmlDevice{index, slot, uuid, gpu_uuid};
      }
    }
  }
  fail(ErrorCategory::cuda, "NVML: the CUDA device with ", named, " at PCI bus id ", pci_bus_id, " is not NVML's device "
       "there (", gpu_uuid, mig ? ", nor any of its MIG devices" : "", "): not reading a GPU this process may not use");
}

std::string Nvml::name(unsigned index) const { return name(NvmlDevice{index, std::nullopt, "", ""}); }

std::string Nvml::name(const NvmlDevice& d) const {
  char name[96] = {};
  if (const nvmlReturn_t code = api_->name(handle_of(*api_, d), name, sizeof name); code != nvml_success) {
    fail(ErrorCategory::cuda, "NVML: ", d.describe(), ": ", api_->error(code));
  }
  return name;
}

GpuSample Nvml::read(unsigned index, std::optional<std::uint64_t>* nvlink_tx_kib,
                     std::optional<std::uint64_t>* nvlink_rx_kib) const {
  return read(NvmlDevice{index, std::nullopt, "", ""}, nvlink_tx_kib, nvlink_rx_kib);
}

GpuSample Nvml::read(const NvmlDevice& d, std::optional<std::uint64_t>* nvlink_tx_kib,
                     std::optional<std::uint64_t>* nvlink_rx_kib) const {
  // A MIG device's handle: NVML answers per instance where it can (memory) and not otherwise.
  nvmlDevice_t device = handle_of(*api_, d);
  // Each reading is optional: a device or driver that does not report one leaves it empty.
  GpuSample s;
  if (nvmlUtilization_t u{}; api_->utilization(device, &u) == nvml_success) {
    s.utilization_percent = u.gpu;
    s.memory_utilization_percent = u.memory;
  }
  if (nvmlMemory_t m{}; api_->memory(device, &m) == nvml_success) {
    s.memory_used_bytes = m.used;
    s.memory_total_bytes = m.total;
  }
  if (unsigned milliwatts = 0; api_->power(device, &milliwatts) == nvml_success) s.power_watts = milliwatts / 1000.0;
  if (unsigned mhz = 0; api_->clock(device, nvml_clock_sm, &mhz) == nvml_success) s.sm_clock_mhz = mhz;
  if (unsigned c = 0; api_->temperature(device, nvml_temperature_gpu, &c) == nvml_success) s.temperature_c = c;
  if (unsigned long long reasons = 0; api_->throttle != nullptr && api_->throttle(device, &reasons) == nvml_success) {
    s.throttle_reasons = reasons;
  }
  if (api_->pcie != nullptr) {  // KB/s over NVML's last 20 ms
    if (unsigned kb = 0; api_->pcie(device, nvml_pcie_tx, &kb) == nvml_success) s.pcie_tx_bytes_per_second = kb * 1024.0;
    if (unsigned kb = 0; api_->pcie(device, nvml_pcie_rx, &kb) == nvml_success) s.pcie_rx_bytes_per_second = kb * 1024.0;
  }
  if (api_->fields != nullptr && nvlink_tx_kib != nullptr && nvlink_rx_kib != nullptr) {
    nvmlFieldValue_t values[2] = {};
    values[0].fieldId = nvml_fi_nvlink_data_tx;
    values[1].fieldId = nvml_fi_nvlink_data_rx;
    values[0].scopeId = values[1].scopeId = nvml_all_links;
    if (api_->fields(device, 2, values) == nvml_success) {
      if (values[0].nvmlReturn == nvml_success) *nvlink_tx_kib = values[0].value.ull;
      if (values[1].nvmlReturn == nvml_success) *nvlink_rx_kib = values[1].value.ull;
    }
  }
  return s;
}

GpuSummary summarize(const std::vector<GpuSample>& samples) {
  GpuSummary out;
  std::vector<double> utilization;
  double power_sum = 0;
  std::size_t power_count = 0;
  for (const GpuSample& s : samples) {
    ++out.samples;
    if (s.utilization_percent) utilization.push_back(*s.utilization_percent);
    if (s.memory_used_bytes) out.memory_used_max = std::max(out.memory_used_max, *s.memory_used_bytes);
    if (s.memory_total_bytes) out.memory_total = *s.memory_total_bytes;
    if (s.power_watts) {
      power_sum += *s.power_watts;
      ++power_count;
      out.power_max_watts = std::max(out.power_max_watts, *s.power_watts);
    }
    if (s.sm_clock_mhz) out.sm_clock_min_mhz = out.sm_clock_min_mhz == 0 ? *s.sm_clock_mhz : std::min(out.sm_clock_min_mhz, *s.sm_clock_mhz);
    if (s.temperature_c) out.temperature_max_c = std::max(out.temperature_max_c, *s.temperature_c);
    if (s.throttle_reasons && *s.throttle_reasons != 0) ++out.throttled_samples;
  }
  if (!utilization.empty()) {
    double sum = 0;
    for (double u : utilization) sum += u;
    out.utilization_mean = sum / static_cast<double>(utilization.size());
    std::sort(utilization.begin(), utilization.end());
    // Nearest rank: the smallest value with at least 95% of the readings at or below it.
    const auto rank = static_cast<std::size_t>(std::ceil(0.95 * static_cast<double>(utilization.size())));
    out.utilization_p95 = utilization[std::max<std::size_t>(rank, 1) - 1];
  }
  if (power_count > 0) out.power_mean_watts = power_sum / static_cast<double>(power_count);
  return out;
}

GpuSampler::GpuSampler(std::shared_ptr<Nvml> nvml, unsigned index, std::chrono::milliseconds interval)
    : GpuSampler(std::move(nvml), NvmlDevice{index, std::nullopt, "", ""}, interval) {}

GpuSampler::GpuSampler(std::shared_ptr<Nvml> nvml, NvmlDevice device, std::chrono::milliseconds interval)
    : nvml_(std::move(nvml)), device_(std::move(device)), interval_(interval) {
  require(interval.count() > 0, "GPU sampling: the interval must be positive, not ", interval.count(), " ms");
  require(device_.index < nvml_->device_count(), "GPU sampling: NVML device ", device_.index, " does not exist (",
          nvml_->device_count(), " devices)");
  thread_ = std::thread([this] { run(); });
}

GpuSampler::~GpuSampler() {
  {
    const std::lock_guard lock(mutex_);
    stop_ = true;
  }
  stop_changed_.notify_all();
  thread_.join();
}

void GpuSampler::run() {
  const auto start = std::chrono::steady_clock::now();
  std::optional<std::uint64_t> last_tx, last_rx;
  auto last_time = start;
  std::unique_lock lock(mutex_);
  while (!stop_) {
    lock.unlock();
    GpuSample sample;
    std::optional<std::uint64_t> tx, rx;
    try {
      sample = nvml_->read(device_, &tx, &rx);
    } catch (const std::exception&) {  // a device gone mid-run: the readings stop, training goes on
      lock.lock();
      return;
    }
    const auto now = std::chrono::steady_clock::now();
    sample.seconds = std::chrono::duration<double>(now - start).count();
    const double elapsed = std::chrono::duration<double>(now - last_time).count();
    if (tx && last_tx && elapsed > 0 && *tx >= *last_tx) sample.nvlink_tx_bytes_per_second = (*tx - *last_tx) * 1024.0 / elapsed;
    if (rx && last_rx && elapsed > 0 && *rx >= *last_rx) sample.nvlink_rx_bytes_per_second = (*rx - *last_rx) * 1024.0 / elapsed;
    last_tx = tx;
    last_rx = rx;
    last_time = now;
    lock.lock();
    samples_.push_back(sample);
    stop_changed_.wait_for(lock, interval_, [this] { return stop_; });
  }
}

std::optional<GpuSample> GpuSampler::latest() const {
  const std::lock_guard lock(mutex_);
  if (samples_.empty()) return std::nullopt;
  return samples_.back();
}

std::vector<GpuSample> GpuSampler::samples() const {
  const std::lock_guard lock(mutex_);
  return samples_;
}

}  // namespace loom::telemetry
