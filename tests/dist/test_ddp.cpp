// The GradientReducer and ZeRO across MPI processes (CTest runs this binary with 2, 3 and 4 ranks):
// data-parallel training equals one process with the whole batch, with and without accumulation,
// in fp32 and with bf16/fp16 compression; ZeRO-1, 2 and 3 equal DDP; an unused parameter and a
// model that differs between processes are errors on every rank rather than hangs.
#include <catch2/catch.hpp>

#include <string>

#include "loom/comm/mpi.hpp"
#include "loom/ddp/gradient_reducer.hpp"
#include "loom/ddp/replicas.hpp"
#include "loom/model/model.hpp"
#include "loom/nn/gpt.hpp"
#include "loom/shard/zero.hpp"
#include "support/ddp_equivalence.hpp"
#include "support/tensor_checks.hpp"

using loom::comm::Communicator;
using loom::test::error_of;

TEST_CASE("data-parallel training across processes equals one process with the whole batch", "[dist][ddp]") {
  std::unique_ptr<Communicator> comm = loom::comm::make_mpi_world_communicator();
  for (std::int64_t accumulation : {1, 3}) {
    for (loom::DType reduction : {loom::DType::f32, loom::DType::bf16, loom::DType::f16}) {
      INFO(comm->size() << " ranks, " << accumulation << " micro-batches, " << loom::dtype_name(reduction));
      loom::test::EquivalenceCase c;
      c.accumulation = accumulation;
      c.reduction = reduction;
      const loom::test::EquivalenceResult r = loom::test::run_ddp_equivalence(*comm, c);
      INFO(r.error);
      // Every rank stops together when any failed: one rank leaving early would meet the others'
      // next collectives out of step.
      REQUIRE(loom::ddp::mean_across_ranks(*comm, r.error.empty() ? 0.0 : 1.0) == 0.0);
      INFO("max |difference| " << r.max_weight_diff << ", max |update| " << r.max_update);
      CHECK(r.tokens_per_step == comm->size() * c.batch_per_rank * 8 * accumulation);
      CHECK(r.max_update > 1e-3);
      const double tolerance = reduction == loom::DType::f32 ? 1e-5 * r.max_update : 2e-2 * r.max_update;
      CHECK(r.max_weight_diff <= tolerance);
      CHECK(r.first_loss_diff <= 1e-5);
      CHECK(r.max_norm_rel_diff <= (reduction == loom::DType::f32 ? 1e-5 : 2e-2));
    }
  }
}

TEST_CASE("ZeRO-1, 2 and 3 across processes equal DDP and one process", "[dist][zero]") {
  std::unique_ptr<Communicator> comm = loom::comm::make_mpi_world_communicator();
  for (int zero : {1, 2, 3}) {
    for (std::int64_t accumulation : {1, 2}) {
      for (bool adamw : {false, true}) {
        INFO(comm->size() << " ranks, ZeRO-" << zero << ", " << accumulation << " micro-batches, "
                          << (adamw ? "AdamW" : "SGD"));
        loom::test::EquivalenceCase c;
        c.accumulation = accumulation;
        c.zero = zero;
        c.adamw = adamw;
        c.max_grad_norm = 0.5f;
        const loom::test::EquivalenceResult r = loom::test::run_ddp_equivalence(*comm, c);
        INFO(r.error);
        REQUIRE(loom::ddp::mean_across_ranks(*comm, r.error.empty() ? 0.0 : 1.0) == 0.0);
        INFO("max |ZeRO - DDP| " << r.max_ddp_weight_diff << ", max |ZeRO - one process| " << r.max_weight_diff);
        CHECK(r.clipped_steps > 0);
        // MPI's all-reduce (DDP) and reduce-scatter (ZeRO) may add the ranks in different orders:
        // last-bit differences, which AdamW amplifies (see tests/unit/ddp/test_ddp_equivalence.cpp).
        CHECK(r.max_ddp_weight_diff <= (adamw ? 2e-5 : 1e-6));
        CHECK(r.max_weight_diff <= (adamw ? 1e-4 : 1e-5 * r.max_update));
      }
    }
  }
}

TEST_CASE("an unused parameter or a differing model fails every process with a named error", "[dist][ddp]") {
  std::unique_ptr<Communicator> comm = loom::comm::make_mpi_world_communicator();
  const int last = comm->size() - 1;
  auto make = [&](const std::string& name, loom::Shape shape) {
    return std::make_unique<loom::model::Parameter>(name, loom::Tensor::zeros(shape, loom::DType::f32), loom::DType::f32,
                                                 false);
  };
  auto a = make("a", {16});
  auto b = make("b", comm->rank() == last ? loom::Shape{4, 5} : loom::Shape{4, 4});
  loom::model::ParameterSpace differing({{"all", {a.get(), b.get()}}});
  const std::string mismatch = error_of([&] { loom::ddp::GradientReducer reducer(*comm, differing); });
  INFO(mismatch);
  CHECK(mismatch.find("parameter #1 is 'b' (4, 4) f32 on rank 0 but 'b' (4, 5) f32 on rank " + std::to_string(last)) !=
        std::string::npos);

  auto c = make("b", {4, 4});
  loom::model::ParameterSpace same({{"all", {a.get(), c.get()}}});
  loom::ddp::GradientReducer reducer(*comm, same);
  a->mark_grad_ready();
  if (comm->rank() != last) c->mark_grad_ready();
  const std::string unused = error_of([&] { reducer.synchronize(); });
  INFO(unused);
  CHECK(unused.find("received no gradient since the last synchronize(): 'b' (rank " + std::to_string(last) + ")") !=
        std::string::npos);
  a->mark_grad_ready();
  c->mark_grad_ready();
  CHECK(error_of([&] { reducer.synchronize(); }) == "no error");
}

TEST_CASE("a ZeRO job whose ranks build different models fails on every rank, naming the difference", "[dist][zero]") {
  std::unique_ptr<Communicator> comm = loom::comm::make_mpi_world_communicator();
  const int last = comm->size() - 1;
  for (int zero : {1, 2, 3}) {
    loom::nn::GPTConfig config{.vocab_size = 32, .context = 8, .layers = 2, .heads = 2, .channels = 16};
    if (comm->rank() == last) config.layers = 3;  // one more unit and more parameters
    loom::nn::GPT model(config, loom::nn::Precision::fp32(), loom::Device::cpu());
    const std::string error = error_of([&] { loom::shard::ZeroEngine engine(*comm, model, zero); });
    INFO(error);
    CHECK(error.find("data-parallel replicas differ") != std::string::npos);
    CHECK(error.find("on rank " + std::to_string(last)) != std::string::npos);
  }
}
