// Catch2 main for tests of the Gloo backend, run as torchrun (or a PyTorchJob) runs a job: N
// processes with RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT, no mpirun
// (tests/dist/torchrun_env.sh starts them). loom::init builds the world once; every rank runs every
// test case, and the job fails if any rank fails.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>

#include "loom/comm/agreement.hpp"
#include "loom/comm/world.hpp"
#include "support/gloo_world.hpp"

namespace {
loom::World* the_world = nullptr;
}

loom::World& loom::test::gloo_world() { return *the_world; }

int main(int argc, char** argv) {
  std::unique_ptr<loom::World> world = loom::init(argc, argv);
  the_world = world.get();
  const int failures = Catch::Session().run(argc, argv);
  const std::int64_t failed_ranks =
      loom::comm::all_reduce_value(world->comm(), failures != 0 ? 1 : 0, loom::comm::ReduceOp::sum);
  if (world->rank() == 0) std::printf("gloo tests: %lld rank(s) failed\n", static_cast<long long>(failed_ranks));
  return failed_ranks == 0 ? 0 : 1;
}
