#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

#include "loom/core/gpu_info.hpp"
#include "loom/core/stream.hpp"
#include "support/tensor_checks.hpp"

using loom::Device;
using loom::ErrorCategory;
using loom::Event;
using loom::Stream;
using loom::test::IsError;

TEST_CASE("CPU streams are immediate and CPU events time the host", "[stream]") {
  Stream stream;
  CHECK(stream.device() == Device::cpu());
  CHECK(stream.native_handle() == nullptr);
  CHECK(stream.query());
  stream.synchronize();

  Event start(Device::cpu(), true), end(Device::cpu(), true);
  CHECK_FALSE(start.recorded());
  start.record(stream);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  end.record(stream);
  CHECK(end.query());
  end.synchronize();
  const float ms = start.elapsed_ms(end);
  CHECK(ms >= 19.0f);
  CHECK(ms < 5000.0f);
  stream.wait(end);  // already complete: nothing to wait for, and no error
}

TEST_CASE("stream and event misuse is reported, not ignored", "[stream]") {
  Stream stream;
  Event untimed(Device::cpu(), false), timed(Device::cpu(), true);
  CHECK_THROWS_MATCHES(untimed.synchronize(), loom::Error, IsError(ErrorCategory::invalid_argument, {"never recorded"}));
  CHECK_THROWS_MATCHES(stream.wait(untimed), loom::Error, IsError(ErrorCategory::invalid_argument, {"never recorded"}));
  untimed.record(stream);
  timed.record(stream);
  CHECK_THROWS_MATCHES(untimed.elapsed_ms(timed), loom::Error, IsError(ErrorCategory::invalid_argument, {"enable_timing"}));
  // An event cannot be recorded on a stream of another device.
  Event other(Device::cpu());
  CHECK_THROWS_MATCHES(other.record(loom::StreamRef(Device::cuda(1), nullptr)), loom::Error,
                       IsError(ErrorCategory::invalid_argument, {"cuda:1"}));
}

TEST_CASE("streams move without double-destroying their handle", "[stream]") {
  Stream a;
  Stream b(std::move(a));
  Stream c;
  c = std::move(b);
  CHECK(c.device() == Device::cpu());
  Event e1(Device::cpu(), true);
  e1.record(c);
  Event e2(std::move(e1));
  CHECK(e2.recorded());
  CHECK_FALSE(e1.recorded());  // NOLINT(bugprone-use-after-move): moved-from state is specified
}

TEST_CASE("a CUDA stream without a usable GPU is a clear error", "[stream]") {
  if (loom::cuda_runtime_status().available()) return;  // tests/cuda covers real streams
  CHECK_THROWS_MATCHES(Stream(Device::cuda(0)), loom::Error, IsError(ErrorCategory::cuda, {"cuda:0"}));
  CHECK_THROWS_MATCHES(Event(Device::cuda(0)), loom::Error, IsError(ErrorCategory::cuda, {"cuda:0"}));
}
