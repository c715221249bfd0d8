// Device isolation against the fake libnvidia-ml (tests/support/fake_nvml.cpp): a CUDA device is
// found in NVML by its UUID, also when CUDA_VISIBLE_DEVICES reorders the GPUs (CUDA's cuda:0 is
// NVML's device 2), without a handle to any other GPU; a UUID that NVML's device at the same bus id
// does not have is refused by name; a MIG instance is found among its GPU's MIG devices, read for
// memory only, and described with its GPU; and the start-up line names the UUID and the visible set.
#include <catch2/catch.hpp>

#include <dlfcn.h>

#include <cstdlib>
#include <thread>

#include "loom/telemetry/device_identity.hpp"

using loom::telemetry::Nvml;
using loom::telemetry::NvmlDevice;

namespace {

constexpr const char* gpu0 = "GPU-f0000000-0000-4000-8000-000000000000";
constexpr const char* gpu1 = "GPU-f1111111-1111-4111-8111-111111111111";
constexpr const char* gpu2 = "GPU-f2222222-2222-4222-8222-222222222222";
constexpr const char* mig = "MIG-c1000000-0000-4000-8000-000000000001";

struct FakeNvml {
  explicit FakeNvml(const char* devices = "2", bool mig_mode = false) {
    ::setenv("LOOM_NVML_LIBRARY", LOOM_FAKE_NVML, 1);
    ::setenv("LOOM_FAKE_NVML_DEVICES", devices, 1);
    if (mig_mode) ::setenv("LOOM_FAKE_NVML_MIG", "1", 1);
  }
  ~FakeNvml() {
    ::unsetenv("LOOM_NVML_LIBRARY");
    ::unsetenv("LOOM_FAKE_NVML_DEVICES");
    ::unsetenv("LOOM_FAKE_NVML_MIG");
  }
  // How many handles the fake gave out for device `index` (3: the MIG device) since NVML started.
  static unsigned handles(unsigned index) {
    void* library = dlopen(LOOM_FAKE_NVML, RTLD_NOW | RTLD_NOLOAD);
    REQUIRE(library != nullptr);
    auto count = reinterpret_cast<unsigned (*)(unsigned)>(dlsym(library, "loom_fake_nvml_handles"));
    REQUIRE(count != nullptr);
    const unsigned n = count(index);
    dlclose(library);
    return n;
  }
};

// What CUDA would report for a device: CUDA's UUID has no prefix (cudaDeviceProp::uuid's bytes).
loom::CudaDeviceProperties cuda_device(int index, const std::string& uuid, const std::string& bus, const std::string& name) {
  loom::CudaDeviceProperties p;
  p.index = index;
  p.uuid = loom::uuid_digits(uuid);
  p.pci_bus_id = bus;
  p.name = name;
  return p;
}

std::shared_ptr<Nvml> load() {
  std::string why_not;
  std::shared_ptr<Nvml> nvml = Nvml::load(&why_not);
  INFO(why_not);
  REQUIRE(nvml != nullptr);
  return nvml;
}

}  // namespace

TEST_CASE("a CUDA device is NVML's device with its UUID when CUDA_VISIBLE_DEVICES reorders the GPUs",
          "[nvml][visible_devices]") {
  const FakeNvml fake("3");
  const auto nvml = load();
  REQUIRE(nvml->device_count() == 3);
  CHECK(nvml->uuid(2) == gpu2);
  CHECK(nvml->index_of_uuid(gpu2) == 2);
  CHECK_THROWS_WITH(nvml->index_of_uuid("GPU-00000000-0000-0000-0000-000000000000"),
                    Catch::Contains("no GPU with UUID GPU-00000000-0000-0000-0000-000000000000"));
  // CUDA_VISIBLE_DEVICES=2,0: CUDA's cuda:0 is the host's GPU 2 and cuda:1 its GPU 0.
  const loom::VisibleDevices visible = loom::parse_visible_devices(std::string_view("2,0"));
  REQUIRE(visible.selectors.size() == 2);
  const loom::CudaDeviceProperties cuda0 = cuda_device(0, gpu2, "0000:09:00.0", "Fake H100 80GB HBM3 (2)");
  const loom::CudaDeviceProperties cuda1 = cuda_device(1, gpu0, "0000:05:00.0", "Fake H100 80GB HBM3");
  const NvmlDevice first = nvml->resolve(cuda0.uuid, cuda0.pci_bus_id);
  CHECK(first.index == 2);  // not NVML's device 0, which the CUDA ordinal would have guessed
  CHECK_FALSE(first.is_mig());
  CHECK(first.uuid == gpu2);
  CHECK(nvml->resolve(cuda1.uuid, cuda1.pci_bus_id).index == 0);
  CHECK(nvml->resolve(gpu0, "0000:05:00.0").index == 0);  // a prefixed UUID too
  CHECK(FakeNvml::handles(1) == 0);  // the GPU outside the visible set was never touched

  const loom::telemetry::DeviceIdentity id = loom::telemetry::identify(loom::Device::cuda(0), cuda0, nvml.get());
  CHECK(id.note.empty());
  REQUIRE(id.nvml.has_value());
  CHECK(id.nvml->index == 2);
  CHECK(loom::telemetry::describe(id) ==
        "cuda:0 = GPU-f2222222-2222-4222-8222-222222222222 (Fake H100 80GB HBM3 (2), bus 0000:09:00.0)");
  CHECK(FakeNvml::handles(1) == 0);
}

TEST_CASE("a CUDA device NVML cannot find by UUID or at its bus is refused by name, not guessed", "[nvml]") {
  const FakeNvml fake;
  const auto nvml = load();
  // NVML's device at that bus has another UUID: it is not this process's GPU.
  CHECK_THROWS_WITH(nvml->resolve("deadbeef-0000-4000-8000-000000000000", "0000:07:00.0"),
                    Catch::Contains("the CUDA device with UUID deadbeef-0000-4000-8000-000000000000 at PCI bus id "
                                    "0000:07:00.0 is not NVML's device there (" + std::string(gpu1) + ")"));
  CHECK_THROWS_WITH(nvml->resolve("deadbeef-0000-4000-8000-000000000000", "0000:99:00.0"),
                    Catch::Contains("no device is the CUDA device with UUID deadbeef-0000-4000-8000-000000000000 at "
                                    "PCI bus id 0000:99:00.0 (Not Found (6))"));
  CHECK(FakeNvml::handles(0) == 0);
  // The identity says so instead of throwing, and keeps CUDA's view.
  const loom::telemetry::DeviceIdentity id = loom::telemetry::identify(
      loom::Device::cuda(0), cuda_device(0, "deadbeef-0000-4000-8000-000000000000", "0000:07:00.0", "Fake GPU"), nvml.get());
  CHECK_FALSE(id.nvml.has_value());
  CHECK_THAT(loom::telemetry::describe(id),
             Catch::StartsWith("cuda:0 = GPU-deadbeef-0000-4000-8000-000000000000 (Fake GPU, bus 0000:07:00.0); NVML: "
                               "NVML: the CUDA device with UUID deadbeef"));
}

TEST_CASE("a MIG instance is found on its GPU, read for memory only and named with its GPU", "[nvml]") {
  const FakeNvml fake("2", true);
  const auto nvml = load();
  REQUIRE(nvml->reports_mig());
  const loom::CudaDeviceProperties cuda0 = cuda_device(0, mig, "0000:07:00.0", "Fake H100 80GB HBM3 MIG 1g.10gb");
  const NvmlDevice instance = nvml->resolve(cuda0.uuid, cuda0.pci_bus_id);
  CHECK(instance.index == 1);
  REQUIRE(instance.is_mig());
  CHECK(*instance.mig == 1);
  CHECK(instance.uuid == mig);
  CHECK(instance.parent_uuid == gpu1);
  CHECK(instance.describe() == "NVML device 1, MIG device 1");
  CHECK(nvml->name(instance) == "Fake H100 80GB HBM3 MIG 1g.10gb");
  CHECK(FakeNvml::handles(0) == 0);

  const loom::telemetry::GpuSample s = nvml->read(instance);
  CHECK(s.memory_used_bytes == (4ull << 30));
  CHECK(s.memory_total_bytes == (10ull << 30));
  CHECK_FALSE(s.utilization_percent.has_value());
  CHECK_FALSE(s.power_watts.has_value());
  CHECK_FALSE(s.sm_clock_mhz.has_value());

  const loom::telemetry::DeviceIdentity id = loom::telemetry::identify(loom::Device::cuda(0), cuda0, nvml.get());
  CHECK(id.mig);
  CHECK(loom::telemetry::describe(id) == "cuda:0 = " + std::string(mig) + " (Fake H100 80GB HBM3 MIG 1g.10gb on " +
                                             gpu1 + ", bus 0000:07:00.0)");
  {
    loom::telemetry::GpuSampler sampler(nvml, instance, std::chrono::milliseconds(2));
    while (sampler.samples().size() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const loom::telemetry::GpuSample latest = *sampler.latest();
    CHECK(latest.memory_used_bytes == (4ull << 30));
    CHECK_FALSE(latest.utilization_percent.has_value());
  }
  CHECK(FakeNvml::handles(0) == 0);
  // CUDA reporting the GPU's own UUID for an instance (an old cuDeviceGetUuid): which instance is
  // not known, so nothing is read.
  CHECK_THROWS_WITH(nvml->resolve(gpu1, "0000:07:00.0"),
                    Catch::Contains("is GPU " + std::string(gpu1) + ", which is in MIG mode"));
}

TEST_CASE("without NVML the identity follows CUDA and says NVML did not confirm it", "[nvml]") {
  const loom::telemetry::DeviceIdentity whole = loom::telemetry::identify(
      loom::Device::cuda(1), cuda_device(1, gpu2, "0000:09:00.0", "NVIDIA H200"), nullptr);
  CHECK(loom::telemetry::describe(whole) == "cuda:1 = " + std::string(gpu2) +
                                                " (NVIDIA H200, bus 0000:09:00.0); NVML: not loaded, GPU or MIG "
                                                "instance told by CUDA's name");
  const loom::telemetry::DeviceIdentity instance = loom::telemetry::identify(
      loom::Device::cuda(0), cuda_device(0, mig, "0000:07:00.0", "NVIDIA H100 80GB HBM3 MIG 1g.10gb"), nullptr);
  CHECK(instance.mig);
  CHECK(instance.uuid == mig);
}

TEST_CASE("a process on the CPU says it uses no GPU, and which GPUs were visible", "[nvml][visible_devices]") {
  const std::string line = loom::telemetry::describe_devices(
      loom::Device::cpu(), nullptr, loom::parse_visible_devices(std::string_view("2,0")));
  CHECK_THAT(line, Catch::StartsWith("devices: no GPU ("));
  CHECK_THAT(line, Catch::EndsWith("); CUDA_VISIBLE_DEVICES=2,0"));
  CHECK_THAT(loom::telemetry::describe_devices(loom::Device::cpu(), nullptr, loom::parse_visible_devices(std::nullopt)),
             Catch::EndsWith("CUDA_VISIBLE_DEVICES unset (every GPU)"));
}
