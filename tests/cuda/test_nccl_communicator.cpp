// The NCCL backend on one GPU (a one-rank communicator): the conformance suite every backend
// passes, debug-mode checks, ordering after the caller's stream, and device checks. Multi-GPU
// runs need a machine with several GPUs (loom::init + mpirun).
#include <catch2/catch.hpp>

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

TEST_CASE("the NCCL communicator rejects tensors on another device", "[cuda][comm]") {
  auto comm = loom::comm::make_nccl_communicator(loom::comm::make_nccl_id(), 0, 1, Device::cuda(0));
  const Tensor host = Tensor::zeros({4}, DType::f32);
  REQUIRE_THROWS_MATCHES(comm->all_reduce(host, host, ReduceOp::sum), loom::Error,
                         loom::test::IsError(loom::ErrorCategory::invalid_argument,
                                             {"NCCL all_reduce", "not on this communicator's device cuda:0"}));
  REQUIRE_THROWS_MATCHES(loom::comm::make_nccl_communicator(loom::comm::make_nccl_id(), 0, 1, Device::cpu()),
                         loom::Error, loom::test::IsError(loom::ErrorCategory::invalid_argument, {"is not a CUDA device"}));
}
