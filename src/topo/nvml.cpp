#include "src/topo/nvml.hpp"

#include <dlfcn.h>

#include <array>

namespace loom::topo::detail {

namespace {

// NVML's ABI (nvml.h, API version 2+): opaque device handles, int return codes (0 = success).
using Device = void*;
struct PciInfo {
  char bus_id_legacy[16];
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
};
struct Memory {
  unsigned long long total, free, used;
};
constexpr unsigned max_nvlinks = 18;  // NVML_NVLINK_MAX_LINKS
constexpr int remote_is_gpu = 0, remote_is_switch = 2;  // nvmlIntNvLinkDeviceType_t

class Library {
 public:
  Library() : handle_(dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL)) {
    if (handle_ == nullptr) {
      const char* why = dlerror();
      error_ = why != nullptr ? why : "dlopen failed";
    }
  }
  const std::string& error() const { return error_; }
  ~Library() {
    if (handle_ != nullptr) dlclose(handle_);
  }
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;
  bool loaded() const { return handle_ != nullptr; }
  template <class Fn>
  Fn get(const char* name) const {
    return reinterpret_cast<Fn>(dlsym(handle_, name));
  }

 private:
  void* handle_;
  std::string error_;
};

std::string trimmed(const char* text) {
  std::string s(text);
  return s.substr(0, s.find('\0'));
}

}  // namespace

std::vector<NvmlGpu> query_nvml(std::string& why) {
  const Library nvml;
  if (!nvml.loaded()) {
    why = "libnvidia-ml.so.1 could not be loaded (" + nvml.error() + "; no NVIDIA driver?)";
    return {};
  }
  auto init = nvml.get<int (*)()>("nvmlInit_v2");
  auto shutdown = nvml.get<int (*)()>("nvmlShutdown");
  auto count = nvml.get<int (*)(unsigned*)>("nvmlDeviceGetCount_v2");
  auto handle = nvml.get<int (*)(unsigned, Device*)>("nvmlDeviceGetHandleByIndex_v2");
  auto name = nvml.get<int (*)(Device, char*, unsigned)>("nvmlDeviceGetName");
  auto memory = nvml.get<int (*)(Device, Memory*)>("nvmlDeviceGetMemoryInfo");
  auto capability = nvml.get<int (*)(Device, int*, int*)>("nvmlDeviceGetCudaComputeCapability");
  auto pci = nvml.get<int (*)(Device, PciInfo*)>("nvmlDeviceGetPciInfo_v3");
  auto link_state = nvml.get<int (*)(Device, unsigned, int*)>("nvmlDeviceGetNvLinkState");
  auto link_remote = nvml.get<int (*)(Device, unsigned, PciInfo*)>("nvmlDeviceGetNvLinkRemotePciInfo_v2");
  auto link_type = nvml.get<int (*)(Device, unsigned, int*)>("nvmlDeviceGetNvLinkRemoteDeviceType");
  auto pcie_gen = nvml.get<int (*)(Device, unsigned*)>("nvmlDeviceGetMaxPcieLinkGeneration");
  auto pcie_width = nvml.get<int (*)(Device, unsigned*)>("nvmlDeviceGetMaxPcieLinkWidth");
  if (init == nullptr || shutdown == nullptr || count == nullptr || handle == nullptr || name == nullptr ||
      memory == nullptr || capability == nullptr || pci == nullptr) {
    why = "libnvidia-ml.so.1 lacks the calls loom needs (a driver older than NVML API 2?)";
    return {};
  }
  if (const int rc = init(); rc != 0) {
    why = "nvmlInit failed with NVML error " + std::to_string(rc) + " (driver not loaded?)";
    return {};
  }
  std::vector<NvmlGpu> gpus;
  unsigned n = 0;
  if (const int rc = count(&n); rc != 0) {
    shutdown();
    why = "nvmlDeviceGetCount failed with NVML error " + std::to_string(rc);
    return {};
  }
  for (unsigned i = 0; i < n; ++i) {
    Device device = nullptr;
    if (handle(i, &device) != 0) continue;
    NvmlGpu gpu;
    std::array<char, 96> text{};
    if (name(device, text.data(), static_cast<unsigned>(text.size())) == 0) gpu.name = trimmed(text.data());
    Memory m{};
    if (memory(device, &m) == 0) gpu.memory_bytes = m.total;
    if (capability(device, &gpu.major, &gpu.minor) != 0) gpu.major = gpu.minor = 0;  // arch unknown
    PciInfo info{};
    if (pci(device, &info) == 0) gpu.bus_id = trimmed(info.bus_id);
    if (pcie_gen != nullptr) pcie_gen(device, &gpu.pcie_generation);
    if (pcie_width != nullptr) pcie_width(device, &gpu.pcie_width);
    for (unsigned link = 0; link_state != nullptr && link_remote != nullptr && link < max_nvlinks; ++link) {
      int active = 0;
      if (link_state(device, link, &active) != 0 || active == 0) continue;
      // The far end: a GPU (its bus id), an NVSwitch, or unknown (not counted as either).
      int type = -1;
      if (link_type != nullptr && link_type(device, link, &type) == 0 && type == remote_is_switch) {
        gpu.nvlink_peers.push_back("switch");
        continue;
      }
      PciInfo remote{};
      if ((type == -1 || type == remote_is_gpu) && link_remote(device, link, &remote) == 0) {
        gpu.nvlink_peers.push_back(trimmed(remote.bus_id));
      }
    }
    gpus.push_back(std::move(gpu));
  }
  shutdown();
  if (gpus.empty()) why = "NVML sees no GPU";
  return gpus;
}

}  // namespace loom::topo::detail
