#include "loom/telemetry/device_identity.hpp"

#include <memory>

#include "loom/core/error.hpp"

namespace loom::telemetry {

DeviceIdentity identify(const Device& device, const CudaDeviceProperties& properties, const Nvml* nvml) {
  DeviceIdentity id;
  id.device = device;
  id.name = properties.name;
  id.pci_bus_id = properties.pci_bus_id;
  // CUDA names a MIG instance "<GPU> MIG <profile>": the prefix until NVML says better.
  id.mig = properties.name.find(" MIG ") != std::string::npos;
  id.uuid = (id.mig ? "MIG-" : "GPU-") + uuid_digits(properties.uuid);
  if (nvml == nullptr) {
    id.note = "not loaded, GPU or MIG instance told by CUDA's name";
    return id;
  }
  try {
    NvmlDevice found = nvml->resolve(properties.uuid, properties.pci_bus_id);
    id.mig = found.is_mig();
    if (!found.uuid.empty()) id.uuid = found.uuid;
    id.parent_uuid = found.parent_uuid;
    id.name = nvml->name(found);
    id.nvml = std::move(found);
  } catch (const Error& e) {
    id.note = e.detail();
  }
  return id;
}

std::string describe(const DeviceIdentity& id) {
  std::string out = id.device.to_string() + " = " + id.uuid + " (" + id.name;
  if (!id.parent_uuid.empty()) out += " on " + id.parent_uuid;
  out += ", bus " + id.pci_bus_id + ")";
  if (!id.note.empty()) out += "; NVML: " + id.note;
  return out;
}

std::string describe_devices(const Device& device, const Nvml* nvml, const VisibleDevices& visible) {
  if (!device.is_cuda()) {
    const CudaRuntimeStatus cuda = cuda_runtime_status();
    return "devices: no GPU (" + (cuda.available() ? std::string("the model is on the CPU") : cuda.reason) + "); " +
           visible.describe();
  }
  const DeviceIdentity id = identify(device, cuda_device_properties(device.index()), nvml);
  std::string out = "devices: " + describe(id) + "; " + visible.describe();
  const auto ordinal = static_cast<std::size_t>(device.index());
  if (ordinal < visible.selectors.size()) {
    const VisibleDeviceSelector& entry = visible.selectors[ordinal];
    const bool by_uuid = entry.kind == VisibleDeviceSelector::Kind::gpu_uuid ||
                         entry.kind == VisibleDeviceSelector::Kind::mig_uuid;
    if (by_uuid && !entry.names_uuid(id.uuid)) {
      out += " (entry " + std::to_string(ordinal) + ", '" + entry.text + "', names another device: an MPS server renumbers them)";
    }
  }
  return out;
}

std::string describe_devices(const Device& device) {
  std::shared_ptr<Nvml> nvml;
  if (device.is_cuda()) {
    std::string why_not;
    nvml = Nvml::load(&why_not);
  }
  return describe_devices(device, nvml.get(), visible_devices_from_environment());
}

}  // namespace loom::telemetry
