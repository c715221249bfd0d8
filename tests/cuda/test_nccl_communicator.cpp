// The NCCL backend on one GPU (a one-rank communicator): the conformance suite every backend
// passes, debug-mode checks, ordering after the caller's stream, a call behind a hung kernel, and
// device checks. Multi-GPU
// runs need a machine with several GPUs (loom::init + mpirun).
#include <catch2/catch.hpp>
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <thread>

#include "loom/comm/nccl.hpp"
#include "loom/core/tensor_ops.hpp"
#include "support/comm_conformance.hpp"
#include "support/tensor_checks.hpp"

using loom::DType;
using loom::Device;
using loom::Tensor;
using loom::comm::ReduceOp;

TEST_CASE("a one-rank NCCL communicator passes the conformance suite", "[cuda][comm]") {
  loom::comm::CommOptions options;
  options.check_collectives = false;
  auto comm = loom::comm::make_nccl_communicator(loom::comm::make_nccl_id(), 0, 1, Device::cuda(0), options);
  REQUIRE(comm->backend() == "nccl");
  REQUIRE(comm->device() == Device::cuda(0));
  const std::string failure = loom::test::run_comm_conformance(*comm);
  INFO(failure);
  REQUIRE(failure.empty());

  options.check_collectives = true;  // the checks' all-gathers run on the GPU too
  auto checked = loom::comm::make_nccl_communicator(loom::comm::make_nccl_id(), 0, 1, Device::cuda(0), options);
  const std::string checked_failure = loom::test::run_comm_conformance(*checked, {{0, 7}, 0});
  INFO(checked_failure);
  REQUIRE(checked_failure.empty());
}

TEST_CASE("NCCL calls start after the work already enqueued on the caller's stream", "[cuda][comm]") {
  auto comm = loom::comm::make_nccl_communicator(loom::comm::make_nccl_id(), 0, 1, Device::cuda(0));
  const loom::Stream stream(Device::cuda(0));
  const std::int64_t n = 1 << 22;
  const Tensor source = Tensor::full({n}, DType::f32, 3, Device::cuda(0));
  const Tensor target = Tensor::zeros({n}, DType::f32, Device::cuda(0));
  const Tensor result = Tensor::zeros({n}, DType::f32, Device::cuda(0));
  loom::copy(target, source, stream);  // enqueued, not finished
  comm->all_reduce(target, result, ReduceOp::sum, stream).wait();
  const std::vector<float> host = result.to_vector<float>();
  REQUIRE(host.front() == 3.0f);
  REQUIRE(host.back() == 3.0f);
}

namespace {

// A host function on a stream that blocks it until `release` is set: a kernel that hangs.
void CUDART_CB block_until_released(void* release) {
  while (!static_cast<std::atomic<bool>*>(release)->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

}  // namespace

TEST_CASE("an NCCL call behind a hung kernel on the caller's stream times out, and teardown is bounded",
          "[cuda][comm]") {
  using Clock = std::chrono::steady_clock;
  loom::comm::CommOptions options;
  options.timeout = std::chrono::milliseconds(1000);
  options.check_collectives = false;
  for (bool release_before_teardown : {true, false}) {
    INFO("released before teardown: " << release_before_teardown);
    auto comm = loom::comm::make_nccl_communicator(loom::comm::make_nccl_id(), 0, 1, Device::cuda(0), options);
    const loom::Stream stream(Device::cuda(0));
    const auto native = static_cast<cudaStream_t>(stream.native_handle());
    // Out of place and averaged: the call has GPU work (made before the stream is blocked: an
    // allocation may synchronize).
    const Tensor in = Tensor::full({1024}, DType::f32, 1, Device::cuda(0));
    const Tensor out = Tensor::zeros({1024}, DType::f32, Device::cuda(0));
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    // Leaked on purpose: the stream's host function reads it until released, even if this test
    // fails midway.
    auto* release = new std::atomic<bool>(false);
    struct Release {
      std::atomic<bool>* flag;
      cudaStream_t stream;
      ~Release() {
        *flag = true;
        cudaStreamSynchronize(stream);
      }
    } released_at_exit{release, native};
    REQUIRE(cudaLaunchHostFunc(native, block_until_released, release) == cudaSuccess);
    const auto start = Clock::now();
    const loom::comm::Work work = comm->all_reduce(in, out, ReduceOp::avg, stream);
    REQUIRE_THROWS_MATCHES(work.wait(std::chrono::seconds(10)), loom::Error,
                           loom::test::IsError(loom::ErrorCategory::timeout,
                                               {"NCCL all_reduce", "not completed within 1000 ms", "never started"}));
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    CHECK(waited >= 1.0);
    CHECK(waited < 1.5);
    if (release_before_teardown) {
      *release = true;
      REQUIRE(cudaStreamSynchronize(native) == cudaSuccess);
    }
    const auto teardown = Clock::now();
    comm.reset();  // released: the aborted call's kernel exits and all is freed; not: left allocated
    CHECK(std::chrono::duration<double>(Clock::now() - teardown).count() < 3.0);
  }
}

TEST_CASE("NCCL calls report their device time, without the wait for the caller's stream", "[cuda][comm]") {
  using Clock = std::chrono::steady_clock;
  auto comm = loom::comm::make_nccl_communicator(loom::comm::make_nccl_id(), 0, 1, Device::cuda(0));
  const loom::Stream stream(Device::cuda(0));
  const auto native = static_cast<cudaStream_t>(stream.native_handle());
  const std::int64_t n = 16 << 20;  // 64 MiB: one rank's all-reduce is a device copy, well under 50 ms
  const Tensor in = Tensor::full({n}, DType::f32, 2, Device::cuda(0));
  const Tensor out = Tensor::zeros({n}, DType::f32, Device::cuda(0));
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  auto* release = new std::atomic<bool>(false);  // leaked on purpose, as above
  REQUIRE(cudaLaunchHostFunc(native, block_until_released, release) == cudaSuccess);
  const auto start = Clock::now();
  const loom::comm::Work work = comm->all_reduce(in, out, ReduceOp::sum, stream);
  std::optional<loom::comm::Completion> completion;
  Clock::time_point completed;
  work.on_complete([&](const loom::comm::Completion& c) {
    completion = c;
    completed = Clock::now();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the caller's stream holds the call back
  *release = true;
  work.wait();
  REQUIRE(completion.has_value());
  CHECK(completion->succeeded);
  const double host_span = std::chrono::duration<double>(completed - start).count();
  CHECK(host_span >= 0.3);
  REQUIRE(completion->device_seconds.has_value());
  CHECK(*completion->device_seconds > 0);
  CHECK(*completion->device_seconds < 0.05);
  CHECK(out.to_vector<float>().back() == 2.0f);
}

TEST_CASE("the NCCL communicator rejects tensors on another device", "[cuda][comm]") {
  auto comm = loom::comm::make_nccl_communicator(loom::comm::make_nccl_id(), 0, 1, Device::cuda(0));
  const Tensor host = Tensor::zeros({4}, DType::f32);
  REQUIRE_THROWS_MATCHES(comm->all_reduce(host, host, ReduceOp::sum), loom::Error,
                         loom::test::IsError(loom::ErrorCategory::invalid_argument,
                                             {"NCCL all_reduce", "not on this communicator's device cuda:0"}));
  REQUIRE_THROWS_MATCHES(loom::comm::make_nccl_communicator(loom::comm::make_nccl_id(), 0, 1, Device::cpu()),
                         loom::Error, loom::test::IsError(loom::ErrorCategory::invalid_argument, {"is not a CUDA device"}));
}
