// NVML, loaded at run time (there is no nvml.h at build time, and machines without a driver have
// no libnvidia-ml): only the calls topology detection needs, declared here with NVML's ABI.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace loom::topo::detail {

struct NvmlGpu {
  std::string name, bus_id;  // bus_id: "00000000:07:00.0"
  int major = 0, minor = 0;
  unsigned long long memory_bytes = 0;
  unsigned pcie_generation = 0, pcie_width = 0;
  // Each active NVLink whose far end NVML could name: another GPU's PCI bus id, or "switch".
  std::vector<std::string> nvlink_peers;
};

// Every GPU NVML sees, or nothing with `why` set (no library, no driver, an NVML error).
std::vector<NvmlGpu> query_nvml(std::string& why);

}  // namespace loom::topo::detail
