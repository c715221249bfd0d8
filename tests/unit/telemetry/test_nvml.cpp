// GPU sampling through NVML, against the fake libnvidia-ml (tests/support/fake_nvml.cpp) loaded by
// the same dlopen path: the scripted readings in every field, NVLink rates from its counters, a
// device found by PCI bus id, the summary's mean, 95th percentile and throttled count, and the
// missing-library and failed-initialisation paths with their reasons.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <thread>

#include "loom/telemetry/nvml.hpp"

using loom::telemetry::GpuSample;
using loom::telemetry::Nvml;

namespace {
struct FakeNvml {
  FakeNvml() { ::setenv("LOOM_NVML_LIBRARY", LOOM_FAKE_NVML, 1); }
  ~FakeNvml() {
    ::unsetenv("LOOM_NVML_LIBRARY");
    ::unsetenv("LOOM_FAKE_NVML_FAIL_INIT");
  }
};
}  // namespace

TEST_CASE("NVML readings come through dlopen with every field", "[telemetry]") {
  const FakeNvml fake;
  std::string why_not;
  const auto nvml = Nvml::load(&why_not);
  REQUIRE(nvml != nullptr);
  CHECK(why_not.empty());
  CHECK(nvml->device_count() == 2);
  CHECK(nvml->name(0) == "Fake H100 80GB HBM3");
  CHECK(nvml->index_of_bus("0000:07:00.0") == 1);
  CHECK_THROWS_WITH(nvml->index_of_bus("0000:99:00.0"), Catch::Contains("no device at PCI bus id 0000:99:00.0"));
  std::optional<std::uint64_t> tx, rx;
  const GpuSample s = nvml->read(1, &tx, &rx);
  CHECK(s.utilization_percent == 30u);
  CHECK(s.memory_utilization_percent == 20u);
  CHECK(s.memory_used_bytes == (40ull << 30));
  CHECK(s.memory_total_bytes == (80ull << 30));
  CHECK(s.power_watts == 350.5);
  CHECK(s.sm_clock_mhz == 1980u);
  CHECK(s.temperature_c == 65u);
  CHECK(s.throttle_reasons == 0u);
  CHECK(s.pcie_tx_bytes_per_second == 1000 * 1024.0);
  CHECK(s.pcie_rx_bytes_per_second == 2000 * 1024.0);
  CHECK(tx == 1024u);
  CHECK(rx == 2048u);
  const GpuSample second = nvml->read(1, &tx, &rx);
  CHECK(second.utilization_percent == 60u);
  CHECK(tx == 2048u);
  const GpuSample third = nvml->read(1, &tx, &rx);
  CHECK(third.utilization_percent == 90u);
  CHECK(third.sm_clock_mhz == 1755u);
  CHECK(third.throttle_reasons == 4u);
}

TEST_CASE("the sampler reads at its interval and the summary gives mean, p95 and extremes", "[telemetry]") {
  const FakeNvml fake;
  std::string why_not;
  const auto nvml = Nvml::load(&why_not);
  REQUIRE(nvml != nullptr);
  std::vector<GpuSample> samples;
  {
    loom::telemetry::GpuSampler sampler(nvml, 0, std::chrono::milliseconds(5));
    while (sampler.samples().size() < 7) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    samples = sampler.samples();
    REQUIRE(sampler.latest().has_value());
  }
  REQUIRE(samples.size() >= 7);
  samples.resize(6);  // two whole cycles of 30, 60, 90
  for (std::size_t i = 1; i < samples.size(); ++i) {
    CHECK(samples[i].seconds > samples[i - 1].seconds);
    REQUIRE(samples[i].nvlink_tx_bytes_per_second.has_value());  // 1024 KiB between readings
    CHECK(*samples[i].nvlink_tx_bytes_per_second ==
          Approx(1024 * 1024.0 / (samples[i].seconds - samples[i - 1].seconds)).epsilon(0.05));
  }
  const loom::telemetry::GpuSummary summary = loom::telemetry::summarize(samples);
  CHECK(summary.samples == 6);
  CHECK(summary.utilization_mean == 60.0);
  CHECK(summary.utilization_p95 == 90.0);
  CHECK(summary.memory_used_max == (40ull << 30));
  CHECK(summary.memory_total == (80ull << 30));
  CHECK(summary.power_mean_watts == 350.5);
  CHECK(summary.sm_clock_min_mhz == 1755u);
  CHECK(summary.temperature_max_c == 65u);
  CHECK(summary.throttled_samples == 2);
  CHECK_THROWS_WITH(loom::telemetry::GpuSampler(nvml, 2, std::chrono::milliseconds(5)),
                    Catch::Contains("NVML device 2 does not exist (2 devices)"));
}

TEST_CASE("a missing or failing NVML is a reason, not an error", "[telemetry]") {
  const FakeNvml fake;
  std::string why_not;
  ::setenv("LOOM_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1", 1);
  CHECK(Nvml::load(&why_not) == nullptr);
  CHECK_THAT(why_not, Catch::Contains("NVML not loaded (/nonexistent/libnvidia-ml.so.1"));
  ::setenv("LOOM_NVML_LIBRARY", LOOM_FAKE_NVML, 1);
  ::setenv("LOOM_FAKE_NVML_FAIL_INIT", "1", 1);
  CHECK(Nvml::load(&why_not) == nullptr);
  CHECK_THAT(why_not, Catch::Contains("nvmlInit_v2 returned Driver Not Loaded (9)"));
}
