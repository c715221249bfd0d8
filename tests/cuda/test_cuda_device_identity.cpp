// On a real GPU: every visible CUDA device is found in the driver's NVML by its UUID (the same
// UUID nvidia-smi -L prints, a MIG instance's own for a MIG device), at the bus id CUDA reports,
// and the start-up line (describe_devices) names that UUID and the CUDA_VISIBLE_DEVICES in force.
#include <catch2/catch.hpp>

#include <array>
#include <cstdio>
#include <memory>
#include <string>

#include "loom/core/gpu_info.hpp"
#include "loom/core/visible_devices.hpp"
#include "loom/telemetry/device_identity.hpp"

namespace {

// nvidia-smi -L's output ("GPU 0: NVIDIA H200 (UUID: GPU-...)" and its MIG lines), or "" without it.
std::string nvidia_smi_list() {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen("nvidia-smi -L 2>/dev/null", "r"), pclose);
  if (!pipe) return "";
  std::string out;
  std::array<char, 512> chunk{};
  while (std::fgets(chunk.data(), chunk.size(), pipe.get()) != nullptr) out += chunk.data();
  return out;
}

}  // namespace

TEST_CASE("each CUDA device is NVML's device with the same UUID, and the start-up line names it", "[cuda][nvml]") {
  std::string why_not;
  const std::shared_ptr<loom::telemetry::Nvml> nvml = loom::telemetry::Nvml::load(&why_not);
  if (!nvml) {
    WARN("NVML not loaded, the UUIDs are not compared: " << why_not);
    return;
  }
  const loom::VisibleDevices visible = loom::visible_devices_from_environment();
  const std::string listed = nvidia_smi_list();
  const int count = loom::cuda_runtime_status().device_count;
  if (!visible.all) CHECK(static_cast<std::size_t>(count) <= visible.selectors.size());
  for (int i = 0; i < count; ++i) {
    const loom::CudaDeviceProperties p = loom::cuda_device_properties(i);
    INFO("cuda:" << i << " " << p.name << " uuid " << p.uuid << " bus " << p.pci_bus_id);
    REQUIRE(p.uuid.size() == 36);
    const loom::telemetry::NvmlDevice found = nvml->resolve(p.uuid, p.pci_bus_id);
    CHECK(loom::uuid_digits(found.uuid) == p.uuid);
    CHECK(found.is_mig() == (p.name.find(" MIG ") != std::string::npos));
    if (!found.is_mig()) {
      CHECK(nvml->uuid(found.index) == found.uuid);
      CHECK(nvml->index_of_bus(p.pci_bus_id) == found.index);
    }
    if (!listed.empty()) CHECK_THAT(listed, Catch::Contains(found.uuid));  // nvidia-smi names the same device
    if (i < static_cast<int>(visible.selectors.size()) && !visible.selectors[i].uuid.empty() &&
        visible.selectors[i].kind != loom::VisibleDeviceSelector::Kind::mig_legacy) {
      CHECK(visible.selectors[i].names_uuid(found.uuid));
    }
    const std::string line = loom::telemetry::describe_devices(loom::Device::cuda(i), nvml.get(), visible);
    CHECK_THAT(line, Catch::StartsWith("devices: cuda:" + std::to_string(i) + " = " + found.uuid + " ("));
    CHECK_THAT(line, !Catch::Contains("; NVML: "));  // NVML confirmed it
    CHECK_THAT(line, Catch::EndsWith(visible.describe()));
  }
  // The convenience form loads NVML and reads the environment itself: the same line.
  if (count > 0) {
    CHECK(loom::telemetry::describe_devices(loom::Device::cuda(0)) ==
          loom::telemetry::describe_devices(loom::Device::cuda(0), nvml.get(), visible));
  }
}
