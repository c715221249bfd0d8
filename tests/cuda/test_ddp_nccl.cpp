// The GradientReducer and ZeRO on the NCCL path, end to end on one GPU: replicas verified and broadcast
// through device memory, buckets reduced on NCCL's stream after backward's kernels, compression
// kernels on the GPU, and training that matches the CPU reference. (Several GPUs: mpirun with
// examples/train_gpt or benchmarks/ddp_bench.)
#include <catch2/catch.hpp>

#include "loom/comm/nccl.hpp"
#include "support/ddp_equivalence.hpp"

TEST_CASE("one-rank NCCL data-parallel training matches the CPU reference", "[cuda][ddp]") {
  auto comm = loom::comm::make_nccl_communicator(loom::comm::make_nccl_id(), 0, 1, loom::Device::cuda(0));
  for (loom::DType reduction : {loom::DType::f32, loom::DType::bf16}) {
    INFO(loom::dtype_name(reduction) << " reduction");
    loom::test::EquivalenceCase c;
    c.accumulation = 2;
    c.reduction = reduction;
    const loom::test::EquivalenceResult r = loom::test::run_ddp_equivalence(*comm, c);
    REQUIRE(r.error.empty());
    INFO("max |difference| " << r.max_weight_diff << ", max |update| " << r.max_update);
    CHECK(r.buckets > 1);
    // GPU against CPU: fp32 GEMMs sum in another order; bf16 rounds each gradient to 8 bits.
    CHECK(r.max_weight_diff <= (reduction == loom::DType::f32 ? 1e-4 : 2e-2) * r.max_update);
    CHECK(r.first_loss_diff <= 1e-4);
    CHECK(r.max_norm_rel_diff <= (reduction == loom::DType::f32 ? 1e-4 : 2e-2));
  }
}

TEST_CASE("one-rank NCCL ZeRO-1 and ZeRO-2 match DDP on the same GPU", "[cuda][zero]") {
  auto comm = loom::comm::make_nccl_communicator(loom::comm::make_nccl_id(), 0, 1, loom::Device::cuda(0));
  for (int zero : {1, 2}) {
    INFO("ZeRO-" << zero);
    loom::test::EquivalenceCase c;
    c.accumulation = 2;
    c.zero = zero;
    c.adamw = true;
    c.max_grad_norm = 0.2f;
    const loom::test::EquivalenceResult r = loom::test::run_ddp_equivalence(*comm, c);
    INFO(r.error);
    REQUIRE(r.error.empty());
    INFO("max |ZeRO - DDP| " << r.max_ddp_weight_diff << ", max |ZeRO - CPU| " << r.max_weight_diff);
    CHECK(r.clipped_steps > 0);
    // One rank: the reduce-scatter is the identity, the shard is the whole space.
    CHECK(r.max_ddp_weight_diff <= (zero == 2 ? 2e-6 : 1e-7));
    CHECK(r.max_weight_diff <= 1e-3);
  }
}
