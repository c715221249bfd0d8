#include <catch2/catch.hpp>

#include <string>

#include "loom/config.hpp"
#include "loom/core/device.hpp"
#include "loom/core/gpu_info.hpp"
#include "loom/core/tensor.hpp"
#include "support/tensor_checks.hpp"

using loom::Device;
using loom::ErrorCategory;
using loom::test::IsError;

TEST_CASE("devices print and parse", "[device]") {
  CHECK(Device::cpu().to_string() == "cpu");
  CHECK(Device::cuda(3).to_string() == "cuda:3");
  CHECK(Device::parse("cpu") == Device::cpu());
  CHECK(Device::parse("cuda") == Device::cuda(0));
  CHECK(Device::parse("cuda:12") == Device::cuda(12));
  CHECK(Device() == Device::cpu());
  CHECK(Device::cuda(0) != Device::cuda(1));
  CHECK(Device::cuda(0) != Device::cpu());
  for (const char* bad : {"gpu", "cuda:", "cuda:-1", "cuda:1x", "CUDA:0", "cuda:99999999999"}) {
    INFO(bad);
    CHECK_THROWS_MATCHES(Device::parse(bad), loom::Error, IsError(ErrorCategory::invalid_argument, {bad}));
  }
  CHECK_THROWS_MATCHES(Device::cuda(-2), loom::Error, IsError(ErrorCategory::invalid_argument, {"-2"}));
}

TEST_CASE("the CUDA runtime query answers cleanly with or without a GPU", "[device]") {
  const loom::CudaRuntimeStatus status = loom::cuda_runtime_status();
  CHECK(status.compiled == bool(LOOM_WITH_CUDA));
  if (!status.compiled) CHECK(status.reason.find("LOOM_CUDA=OFF") != std::string::npos);
  if (status.available()) {
    CHECK(status.reason.empty());
    CHECK(status.driver_version > 0);
    const loom::CudaDeviceProperties props = loom::cuda_device_properties(0);
    CHECK(!props.name.empty());
    CHECK(props.total_memory_bytes > 0);
    CHECK_THROWS_MATCHES(loom::cuda_device_properties(status.device_count), loom::Error,
                         IsError(ErrorCategory::cuda, {"does not exist"}));
  } else {
    CHECK(status.device_count == 0);
    CHECK_FALSE(status.reason.empty());
    // Using a GPU that is not there is a cuda Error that says why, never a crash.
    CHECK_THROWS_MATCHES(loom::Tensor::empty({4}, loom::DType::f32, Device::cuda(0)), loom::Error,
                         IsError(ErrorCategory::cuda, {"cuda:0", status.reason}));
    CHECK_THROWS_MATCHES(loom::cuda_device_properties(0), loom::Error, IsError(ErrorCategory::cuda, {"cuda:0"}));
  }
}
