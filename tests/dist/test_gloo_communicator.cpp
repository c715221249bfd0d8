// loom's Gloo backend in processes started as torchrun starts them (tests/dist/torchrun_env.sh,
// 2, 3 and 4 ranks, no mpirun; and as srun without MPI support starts them, --slurm): loom::init
// chooses Gloo and says why; the conformance suite every
// backend passes, on the world and on split groups; a recv of the wrong size; a rank that joins too
// late; DDP and ZeRO-1/2 equal one process, as under MPI.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>

#include "loom/comm/agreement.hpp"
#include "loom/core/error.hpp"
#include "loom/ddp/replicas.hpp"
#include "support/comm_conformance.hpp"
#include "support/error_message.hpp"
#include "support/ddp_equivalence.hpp"
#include "support/gloo_world.hpp"

using loom::DType;
using loom::Tensor;
using loom::comm::Communicator;
using loom::comm::ReduceOp;

namespace {

std::string outcome(const std::function<void()>& call) { return loom::test::error_outcome(call); }

}  // namespace

TEST_CASE("loom::init chooses Gloo for a job no MPI launcher started, and says why", "[gloo][init]") {
  loom::World& world = loom::test::gloo_world();
  REQUIRE(world.comm().backend() == "gloo");
  // tests/dist/torchrun_env.sh sets torchrun's variables, or with --slurm srun's (no PMIx).
  const bool slurm = std::getenv("SLURM_PROCID") != nullptr;
  CHECK(world.launch().launcher == (slurm ? "SLURM" : "torchrun"));
  CHECK_THAT(world.backend_choice(),
             Catch::StartsWith(slurm ? "gloo: started by srun without MPI support" : "gloo: started by torchrun") &&
                 Catch::Contains("no MPI launcher"));
  CHECK(world.comm().rank() == std::stoi(std::getenv(slurm ? "SLURM_PROCID" : "RANK")));
  CHECK(world.comm().size() == std::stoi(std::getenv(slurm ? "SLURM_NTASKS" : "WORLD_SIZE")));
}

TEST_CASE("the Gloo communicator passes the conformance suite", "[gloo]") {
  Communicator& comm = loom::test::gloo_world().comm();
  const std::string failure = loom::test::run_comm_conformance(comm);
  INFO(failure);
  REQUIRE(failure.empty());
}

TEST_CASE("groups split from a Gloo communicator pass the conformance suite", "[gloo]") {
  Communicator& world = loom::test::gloo_world().comm();
  // Even and odd ranks, ranked in reverse; the last rank of an odd world stays out.
  const bool out = world.size() % 2 == 1 && world.rank() == world.size() - 1;
  std::unique_ptr<Communicator> group = world.split(out ? Communicator::no_color : world.rank() % 2, -world.rank());
  if (out) {
    REQUIRE(group == nullptr);
  } else {
    REQUIRE(group != nullptr);
    CHECK(group->backend() == "gloo");
    const int members = world.size() / 2;
    REQUIRE(group->size() == members);
    CHECK(group->rank() == members - 1 - world.rank() / 2);
    loom::test::ConformanceSizes sizes;
    sizes.large = 100003;
    const std::string failure = loom::test::run_comm_conformance(*group, sizes);
    INFO(failure);
    REQUIRE(failure.empty());
  }
  world.barrier().wait();
}

TEST_CASE("a Gloo recv that does not match its send is a clear error, and the sender is not stuck", "[gloo]") {
  Communicator& comm = loom::test::gloo_world().comm();
  if (comm.rank() == 0) {
    REQUIRE(outcome([&] { comm.send(Tensor::zeros({6}, DType::f32), 1).wait(); }) == "no error");
  } else if (comm.rank() == 1) {
    const std::string result = outcome([&] { comm.recv(Tensor::zeros({5}, DType::f32), 0).wait(); });
    INFO(result);
    REQUIRE_THAT(result, Catch::StartsWith("invalid argument") && Catch::Contains("rank 0 sent 24 bytes") &&
                             Catch::Contains("20 bytes") && Catch::Contains("Gloo recv #"));
  }
  comm.barrier().wait();
}

TEST_CASE("a rank that joins a Gloo collective too late: the others fail at the timeout naming it, and it learns at once",
          "[gloo]") {
  Communicator& world = loom::test::gloo_world().comm();
  const auto timeout = std::chrono::milliseconds(1500);
  std::unique_ptr<Communicator> comm = world.split(0, world.rank(), timeout);
  const int late = comm->size() - 1;
  Tensor t = Tensor::full({1000}, DType::f32, 1.0);
  const auto start = std::chrono::steady_clock::now();
  std::string result;
  if (comm->rank() == late) {
    std::this_thread::sleep_for(timeout + std::chrono::milliseconds(1000));
    result = outcome([&] { comm->all_reduce(t, t, ReduceOp::sum).wait(); });
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    INFO(result);
    CHECK(seconds < 2.5 + 1.0);  // at once, not after a timeout of its own
    CHECK_THAT(result, Catch::Contains("aborted") && Catch::Contains("not completed within 1500 ms"));
  } else {
    result = outcome([&] { comm->all_reduce(t, t, ReduceOp::sum).wait(); });
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    INFO(result);
    CHECK(seconds >= 1.5);
    CHECK(seconds <= 1.5 * 1.1 + 0.1);
    // The ranks next to the late one wait for it; the others may wait for a rank that waits for it.
    // Each fails by its own timeout, or by the notice of the rank whose deadline was seen first.
    const bool own = result.rfind("timeout", 0) == 0;
    CHECK((own || result.rfind("aborted", 0) == 0));
    CHECK_THAT(result, Catch::Contains("Gloo all_reduce #1") && Catch::Contains("not completed within 1500 ms"));
    if (!own) CHECK_THAT(result, Catch::Contains("aborted the Gloo communicator"));
    if (comm->size() == 2) CHECK_THAT(result, Catch::StartsWith("timeout") && Catch::Contains("rank " + std::to_string(late)));
    // Later calls fail at once, naming the first failure.
    CHECK_THAT(outcome([&] { comm->barrier().wait(); }),
               Catch::Contains("aborted by an earlier") && Catch::Contains("not completed within 1500 ms"));
  }
  world.barrier().wait();
}

TEST_CASE("data-parallel training over Gloo equals one process with the whole batch", "[gloo]") {
  Communicator& comm = loom::test::gloo_world().comm();
  for (std::int64_t accumulation : {1, 3}) {
    for (DType reduction : {DType::f32, DType::bf16}) {
      INFO(comm.size() << " ranks, " << accumulation << " micro-batches, " << loom::dtype_name(reduction));
      loom::test::EquivalenceCase c;
      c.accumulation = accumulation;
      c.reduction = reduction;
      const loom::test::EquivalenceResult r = loom::test::run_ddp_equivalence(comm, c);
      INFO(r.error);
      REQUIRE(loom::ddp::mean_across_ranks(comm, r.error.empty() ? 0.0 : 1.0) == 0.0);
      CHECK(r.max_update > 1e-3);
      const double tolerance = reduction == DType::f32 ? 1e-5 * r.max_update : 2e-2 * r.max_update;
      CHECK(r.max_weight_diff <= tolerance);
      CHECK(r.first_loss_diff <= 1e-5);
    }
  }
}

TEST_CASE("ZeRO-1 and 2 over Gloo equal DDP and one process", "[gloo]") {
  Communicator& comm = loom::test::gloo_world().comm();
  for (int zero : {1, 2}) {
    for (bool adamw : {false, true}) {
      INFO(comm.size() << " ranks, ZeRO-" << zero << ", " << (adamw ? "AdamW" : "SGD"));
      loom::test::EquivalenceCase c;
      c.accumulation = 2;
      c.zero = zero;
      c.adamw = adamw;
      c.max_grad_norm = 0.5f;
      const loom::test::EquivalenceResult r = loom::test::run_ddp_equivalence(comm, c);
      INFO(r.error);
      REQUIRE(loom::ddp::mean_across_ranks(comm, r.error.empty() ? 0.0 : 1.0) == 0.0);
      CHECK(r.clipped_steps > 0);
      CHECK(r.max_ddp_weight_diff <= (adamw ? 2e-5 : 1e-6));
      CHECK(r.max_weight_diff <= (adamw ? 1e-4 : 1e-5 * r.max_update));
    }
  }
}
