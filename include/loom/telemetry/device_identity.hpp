// Which GPU this process uses, named the way nvidia-smi -L names it, for the start-up line:
//   devices: cuda:0 = GPU-8932f937-... (NVIDIA H200, bus 0000:07:00.0); CUDA_VISIBLE_DEVICES=2,0
//   devices: cuda:0 = MIG-c6d4f1ef-... (NVIDIA H100 80GB HBM3 MIG 1g.10gb on GPU-8932f937-..., bus ...); ...
//   devices: no GPU (the model is on the CPU); CUDA_VISIBLE_DEVICES unset (every GPU)
// A CUDA ordinal means nothing outside this process (CUDA_VISIBLE_DEVICES renumbers the GPUs); the
// UUID is what the job's GPU is. CUDA gives the UUID's digits; NVML (Nvml::resolve, which reads
// no other GPU) says whether they are a whole GPU's or a MIG instance's. Without NVML the
// prefix follows CUDA's name (a MIG instance's has " MIG " in it) and the line says NVML did not
// confirm it.
#pragma once

#include <optional>
#include <string>

#include "loom/core/device.hpp"
#include "loom/core/gpu_info.hpp"
#include "loom/core/visible_devices.hpp"
#include "loom/telemetry/nvml.hpp"

namespace loom::telemetry {

struct DeviceIdentity {
  Device device;
  std::string uuid;         // "GPU-..." or "MIG-..."
  std::string name;         // NVML's name when it resolved the device (a MIG instance's own), else CUDA's
  std::string pci_bus_id;   // "0000:07:00.0"
  bool mig = false;         // a MIG instance
  std::string parent_uuid;  // a MIG instance's GPU, when NVML named it
  std::optional<NvmlDevice> nvml;  // NVML's device, when NVML confirmed the identity
  std::string note;         // why NVML did not confirm it; "" when it did
};

// The identity of the CUDA device with these properties; nvml may be null (not loaded). Never
// throws for NVML's sake: an NVML that cannot find the device leaves the reason in `note`.
DeviceIdentity identify(const Device& device, const CudaDeviceProperties& properties, const Nvml* nvml);

// "cuda:0 = GPU-... (NAME, bus B)", "cuda:0 = MIG-... (NAME on GPU-..., bus B)", with
// "; NVML: <note>" when NVML did not confirm it.
std::string describe(const DeviceIdentity& identity);

// The start-up line for the device this process uses: "devices: " + describe(identity) and the
// visible set (VisibleDevices::describe), noting a CUDA_VISIBLE_DEVICES entry at this device's
// ordinal that names another UUID (an MPS server renumbers devices). On the CPU: "devices: no GPU
// (...)" with the reason: the model is on the CPU, or why CUDA has no device.
std::string describe_devices(const Device& device, const Nvml* nvml, const VisibleDevices& visible);
// The same with NVML loaded here (for a CUDA device only) and this process's CUDA_VISIBLE_DEVICES.
std::string describe_devices(const Device& device);

}  // namespace loom::telemetry
