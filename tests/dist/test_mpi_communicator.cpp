// loom's MPI backend under mpirun (2, 3 and 4 ranks): the conformance suite every backend passes,
// a peer that joins too late (timeout on the others within the configured time, then an aborted
// communicator), mismatched collectives under LOOM_DEBUG_COLLECTIVES, and bad arguments.
#include <catch2/catch.hpp>
#include <mpi.h>

#include <sys/resource.h>

#include <chrono>
#include <thread>

#include "loom/comm/mpi.hpp"
#include "loom/comm/world.hpp"
#include "loom/core/error.hpp"
#include "loom/core/mpi_check.hpp"
#include "support/comm_conformance.hpp"

using loom::DType;
using loom::Tensor;
using loom::comm::Communicator;
using loom::comm::ReduceOp;

namespace {

std::string outcome(const std::function<void()>& call) {
  try {
    call();
  } catch (const loom::Error& e) {
    return std::string(to_string(e.category())) + ": " + e.what();
  }
  return "no error";
}

void world_barrier() { loom::check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

}  // namespace

TEST_CASE("the MPI communicator passes the conformance suite", "[dist][comm]") {
  std::unique_ptr<Communicator> comm = loom::comm::make_mpi_world_communicator();
  REQUIRE(comm->backend() == "mpi");
  const std::string failure = loom::test::run_comm_conformance(*comm);
  INFO(failure);
  REQUIRE(failure.empty());
}

TEST_CASE("a rank that joins an MPI collective too late gives a timeout on the others", "[dist][comm]") {
  loom::comm::CommOptions options;
  options.timeout = std::chrono::milliseconds(400);
  std::unique_ptr<Communicator> comm = loom::comm::make_mpi_world_communicator(options);
  const Tensor t = Tensor::full({1000}, DType::f32, 1);
  if (comm->rank() == 0) {
    // Joins only after the others have timed out; the collective then completes for everyone, so
    // no thread stays inside MPI.
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    comm->all_reduce(t, t, ReduceOp::sum).wait();
    REQUIRE(t.to_vector<float>().front() == static_cast<float>(comm->size()));
  } else {
    const auto start = std::chrono::steady_clock::now();
    const std::string first = outcome([&] { comm->all_reduce(t, t, ReduceOp::sum).wait(); });
    const auto waited = std::chrono::steady_clock::now() - start;
    const std::string later = outcome([&] { comm->barrier().wait(); });
    INFO(first << " / " << later);
    REQUIRE_THAT(first, Catch::StartsWith("timeout") && Catch::Contains("MPI all_reduce") &&
                            Catch::Contains("not completed within 400 ms"));
    REQUIRE(waited >= std::chrono::milliseconds(400));
    REQUIRE(waited < std::chrono::milliseconds(1400));
    REQUIRE_THAT(later, Catch::StartsWith("timeout") && Catch::Contains("aborted by an earlier timeout"));
  }
  world_barrier();
}

TEST_CASE("a stuck rank is named by the others within the timeout plus 10%, and waiting costs no CPU",
          "[dist][comm][stuck]") {
  loom::comm::CommOptions options;
  options.timeout = std::chrono::milliseconds(1000);
  std::unique_ptr<Communicator> comm = loom::comm::make_mpi_world_communicator(options);
  const Tensor t = Tensor::full({256}, DType::f32, 1);
  comm->all_reduce(t, t, ReduceOp::sum).wait();  // call #1 completes everywhere
  const int stuck = comm->size() - 1;
  if (comm->rank() == stuck) {
    // Busy elsewhere (as a stopped or slow rank is) past the others' timeout, then joins, so the
    // collective completes and nothing stays pending.
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    comm->all_reduce(t, t, ReduceOp::sum).wait();
  } else {
    rusage before{}, after{};
    getrusage(RUSAGE_SELF, &before);
    const auto start = std::chrono::steady_clock::now();
    const std::string error = outcome([&] { comm->all_reduce(t, t, ReduceOp::sum).wait(); });
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    getrusage(RUSAGE_SELF, &after);
    const double cpu = static_cast<double>(after.ru_utime.tv_sec - before.ru_utime.tv_sec + after.ru_stime.tv_sec -
                                           before.ru_stime.tv_sec) +
                       static_cast<double>(after.ru_utime.tv_usec - before.ru_utime.tv_usec + after.ru_stime.tv_usec -
                                           before.ru_stime.tv_usec) * 1e-6;
    INFO(error << "\nwaited " << waited << " s, CPU " << cpu << " s");
    CHECK_THAT(error, Catch::StartsWith("timeout") && Catch::Contains("MPI all_reduce #2") &&
                          Catch::Contains("not completed within 1000 ms") &&
                          Catch::Contains("rank(s) " + std::to_string(stuck) + " did not answer"));
    if (comm->size() > 2) {
      const int other = comm->rank() == 0 ? 1 : 0;
      CHECK_THAT(error, Catch::Contains("rank " + std::to_string(other) + " is waiting in this call too"));
    }
    CHECK(waited >= 1.0);
    CHECK(waited < 1.25);  // the timeout + 10% (the answers' grace is 5%), with room for a loaded machine
    CHECK(cpu < 0.3 * waited);
  }
  world_barrier();
}

TEST_CASE("LOOM_DEBUG_COLLECTIVES names mismatched MPI calls on every rank", "[dist][comm]") {
  loom::comm::CommOptions options;
  options.check_collectives = true;
  std::unique_ptr<Communicator> comm = loom::comm::make_mpi_world_communicator(options);
  const Tensor t = Tensor::zeros({8}, DType::i32);
  const std::string result = outcome([&] {
    if (comm->rank() == 0) comm->broadcast(t, 0).wait();
    else comm->all_reduce(t, t, ReduceOp::min).wait();
  });
  INFO(result);
  REQUIRE_THAT(result, Catch::Contains("collective mismatch on the mpi communicator") &&
                           Catch::Contains("rank 0 called call #0 broadcast(8 x i32, root 0)") &&
                           Catch::Contains("called call #0 all_reduce(8 x i32, min)"));
  world_barrier();
}

TEST_CASE("an MPI recv that does not match its send is a clear error, and the sender is not stuck", "[dist][comm]") {
  std::unique_ptr<Communicator> comm = loom::comm::make_mpi_world_communicator();
  if (comm->rank() == 0) {
    REQUIRE(outcome([&] { comm->send(Tensor::zeros({6}, DType::f32), 1).wait(); }) == "no error");
  } else if (comm->rank() == 1) {
    const std::string result = outcome([&] { comm->recv(Tensor::zeros({5}, DType::f32), 0).wait(); });
    INFO(result);
    REQUIRE_THAT(result, Catch::StartsWith("invalid argument") && Catch::Contains("rank 0 sent 24 bytes") &&
                             Catch::Contains("20 bytes"));
  }
  REQUIRE_THROWS_WITH(comm->all_reduce(Tensor::zeros({4}, DType::f32), Tensor::zeros({4}, DType::f16), ReduceOp::sum),
                      Catch::Contains("differ in dtype"));
  comm->barrier().wait();
}

TEST_CASE("loom::init under mpirun builds an MPI world that matches the launcher", "[dist][comm]") {
  char name[] = "loom_dist_tests";
  char* args[] = {name, nullptr};
  int argc = 1;
  char** argv = args;
  loom::InitOptions options;
  options.device_type = loom::DeviceType::cpu;
  std::unique_ptr<loom::World> world = loom::init(argc, argv, options);  // MPI is already running: kept
  int rank = -1, size = 0;
  loom::check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "MPI_Comm_rank");
  loom::check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size");
  REQUIRE(world->launch().launcher == "Open MPI");
  REQUIRE(world->rank() == rank);
  REQUIRE(world->size() == size);
  REQUIRE(world->comm().backend() == "mpi");
  const Tensor t = Tensor::full({3}, DType::i64, rank + 1);
  world->comm().all_reduce(t, t, ReduceOp::sum).wait();
  REQUIRE(t.to_vector<std::int64_t>() == std::vector<std::int64_t>(3, std::int64_t{size} * (size + 1) / 2));
}
