// loom's MPI backend under mpirun (2, 3 and 4 ranks): the conformance suite every backend passes,
// a peer that joins too late (timeout on the others within the configured time, then an aborted
// communicator), mismatched collectives under LOOM_DEBUG_COLLECTIVES, and bad arguments.
#include <catch2/catch.hpp>
#include <mpi.h>

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

#include "loom/comm/mpi.hpp"
#include "loom/comm/world.hpp"
#include "loom/core/error.hpp"
#include "loom/core/mpi_check.hpp"
#include "support/comm_conformance.hpp"
#include "support/error_message.hpp"

using loom::DType;
using loom::Tensor;
using loom::comm::Communicator;
using loom::comm::ReduceOp;

namespace {

std::string outcome(const std::function<void()>& call) { return loom::test::error_outcome(call); }

void world_barrier() { loom::check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

}  // namespace

TEST_CASE("the MPI communicator passes the conformance suite", "[dist][comm]") {
  std::unique_ptr<Communicator> comm = loom::comm::make_mpi_world_communicator();
  REQUIRE(comm->backend() == "mpi");
  const std::string failure = loom::test::run_comm_conformance(*comm);
  INFO(failure);
  REQUIRE(failure.empty());
}

TEST_CASE("a rank that joins an MPI collective too late gives a timeout on the others, and learns it at once",
          "[dist][comm]") {
  loom::comm::CommOptions options;
  options.timeout = std::chrono::milliseconds(400);
  std::unique_ptr<Communicator> comm = loom::comm::make_mpi_world_communicator(options);
  const Tensor t = Tensor::full({1000}, DType::f32, 1);
  if (comm->rank() == 0) {
    // Comes after the others have given up: they told it why, so it fails at once instead of
    // waiting out its own timeout.
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    const auto start = std::chrono::steady_clock::now();
    const std::string late = outcome([&] { comm->all_reduce(t, t, ReduceOp::sum).wait(); });
    const auto waited = std::chrono::steady_clock::now() - start;
    INFO(late);
    CHECK_THAT(late, Catch::StartsWith("timeout") && Catch::Contains("MPI all_reduce #1 (rank 0 of") &&
                           Catch::Contains("aborted the MPI communicator: MPI all_reduce #1 (rank ") &&
                           Catch::Contains("not completed within 400 ms") &&
                           Catch::Contains("rank 0 has not reached this call (it has made no call yet)"));
    CHECK(waited < std::chrono::milliseconds(200));
  } else {
    const auto start = std::chrono::steady_clock::now();
    const std::string first = outcome([&] { comm->all_reduce(t, t, ReduceOp::sum).wait(); });
    const auto waited = std::chrono::steady_clock::now() - start;
    const std::string later = outcome([&] { comm->barrier().wait(); });
    INFO(first << " / " << later);
    CHECK_THAT(first, Catch::StartsWith("timeout") && Catch::Contains("MPI all_reduce #1") &&
                          Catch::Contains("not completed within 400 ms"));
    CHECK(waited >= std::chrono::milliseconds(400));
    CHECK(waited < std::chrono::milliseconds(600));
    CHECK_THAT(later, Catch::StartsWith("timeout") && Catch::Contains("aborted by an earlier timeout"));
  }
  world_barrier();
}

namespace {

// MPI_COMM_WORLD without its last rank (made once, by every rank but the last).
MPI_Comm waiting_ranks(int size) {
  static MPI_Comm comm = [&] {
    MPI_Group world = MPI_GROUP_NULL, group = MPI_GROUP_NULL;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    const int excluded[] = {size - 1};
    MPI_Group_excl(world, 1, excluded, &group);
    MPI_Comm out = MPI_COMM_NULL;
    MPI_Comm_create_group(MPI_COMM_WORLD, group, 0, &out);
    MPI_Group_free(&group);
    MPI_Group_free(&world);
    return out;
  }();
  return comm;
}

double cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) * 1e-6;
}

// What the ranks that wait for a late one see in one all_reduce with a 1 s timeout, checked: the
// error within the timeout + 10%, naming the call, the late rank (as `named` says) and the other
// waiting ranks; little CPU spent while waiting.
void expect_waiting_ranks_fail(Communicator& comm, const std::string& named) {
  const Tensor t = Tensor::full({256}, DType::f32, 1);
  const double cpu_before = cpu_seconds();
  const auto start = std::chrono::steady_clock::now();
  const std::string error = outcome([&] { comm.all_reduce(t, t, ReduceOp::sum).wait(); });
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double cpu = cpu_seconds() - cpu_before;
  INFO(error << "\nwaited " << waited << " s, CPU " << cpu << " s");
  CHECK_THAT(error, Catch::StartsWith("timeout") && Catch::Contains("MPI all_reduce #2") &&
                        Catch::Contains("not completed within 1000 ms") && Catch::Contains(named));
  if (comm.size() > 2) {  // another waiting rank: still waiting, or timed out a moment earlier
    const std::string other = "rank " + std::to_string(comm.rank() == 0 ? 1 : 0);
    CHECK_THAT(error, Catch::Contains(other + " is waiting in this call too") ||
                          Catch::Contains(other + " has given up on this call too"));
  }
  CHECK(waited >= 1.0);
  CHECK(waited < 1.1);  // the timeout + 10%
  CHECK(cpu < 0.3 * waited);
}

}  // namespace

TEST_CASE("a rank busy elsewhere is named by the others within the timeout plus 10%, and waiting costs no CPU",
          "[dist][comm][stuck]") {
  loom::comm::CommOptions options;
  options.timeout = std::chrono::milliseconds(1000);
  std::unique_ptr<Communicator> comm = loom::comm::make_mpi_world_communicator(options);
  const Tensor t = Tensor::full({256}, DType::f32, 1);
  comm->all_reduce(t, t, ReduceOp::sum).wait();  // call #1 completes everywhere
  const int busy = comm->size() - 1;
  if (comm->rank() == busy) {
    // Busy in its own code past the others' timeout (its status thread still answers); when it
    // comes to the call, it fails at once with the others' reason.
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    const std::string late = outcome([&] { comm->all_reduce(t, t, ReduceOp::sum).wait(); });
    INFO(late);
    CHECK_THAT(late, Catch::StartsWith("timeout") && Catch::Contains("aborted the MPI communicator"));
  } else {
    expect_waiting_ranks_fail(*comm,
                              "rank " + std::to_string(busy) + " has not reached this call (it is busy after its call #1)");
  }
  world_barrier();
}

TEST_CASE("a stopped rank is named as not answering by the others within the timeout plus 10%",
          "[dist][comm][stuck]") {
  loom::comm::CommOptions options;
  options.timeout = std::chrono::milliseconds(1000);
  std::unique_ptr<Communicator> comm = loom::comm::make_mpi_world_communicator(options);
  std::vector<int> pids(static_cast<std::size_t>(comm->size()));
  const int pid = getpid();
  loom::check_mpi(MPI_Allgather(&pid, 1, MPI_INT, pids.data(), 1, MPI_INT, MPI_COMM_WORLD), "MPI_Allgather");
  const Tensor t = Tensor::full({256}, DType::f32, 1);
  comm->all_reduce(t, t, ReduceOp::sum).wait();  // call #1 completes everywhere
  const int stopped = comm->size() - 1;
  int go = 0;
  if (comm->rank() == stopped) {
    // Stopped by rank 0 while it waits here (SIGSTOP: no thread of it runs) until the others have
    // failed, then continued and released. The others' data for call #2 may be waiting for it, so
    // that call may complete here; the others' reason reached it while it was stopped, and its
    // next call fails with it.
    loom::check_mpi(MPI_Recv(&go, 1, MPI_INT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv");
    const std::string late = outcome([&] { comm->all_reduce(t, t, ReduceOp::sum).wait(); });
    const std::string next = outcome([&] { comm->all_reduce(t, t, ReduceOp::sum).wait(); });
    INFO(late << "\n" << next);
    CHECK((late == "no error" || late.find("aborted the MPI communicator") != std::string::npos));
    CHECK_THAT(next, Catch::StartsWith("timeout") && Catch::Contains("aborted the MPI communicator: MPI all_reduce #2") &&
                         Catch::Contains("did not answer"));
  } else {
    if (comm->rank() == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // in its MPI_Recv by now
      REQUIRE(kill(pids[static_cast<std::size_t>(stopped)], SIGSTOP) == 0);
    }
    loom::check_mpi(MPI_Barrier(comm->size() > 2 ? waiting_ranks(comm->size()) : MPI_COMM_SELF), "MPI_Barrier");
    expect_waiting_ranks_fail(*comm, "rank(s) " + std::to_string(stopped) + " did not answer within 50 ms");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // every waiting rank has its error
    if (comm->rank() == 0) {
      REQUIRE(kill(pids[static_cast<std::size_t>(stopped)], SIGCONT) == 0);
      loom::check_mpi(MPI_Send(&go, 1, MPI_INT, stopped, 0, MPI_COMM_WORLD), "MPI_Send");
    }
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

TEST_CASE("a barrier and a split that meet are a mismatch every rank names, not a hang", "[dist][comm]") {
  std::unique_ptr<Communicator> comm = loom::comm::make_mpi_world_communicator();
  const std::string result = outcome([&] {
    if (comm->rank() == 0) comm->barrier().wait();
    else comm->split(0, comm->rank());
  });
  INFO(result);
  const std::string mine = comm->rank() == 0 ? "barrier()" : "split()", theirs = comm->rank() == 0 ? "split()" : "barrier()";
  CHECK_THAT(result, Catch::StartsWith("invalid argument") && Catch::Contains("collective mismatch") &&
                         Catch::Contains("this rank's collective #1 is " + mine) &&
                         Catch::Contains("'s collective #1 is " + theirs));
  // The communicator is aborted: the ranks no longer agree on what comes next.
  CHECK_THAT(outcome([&] { comm->barrier().wait(); }), Catch::Contains("was aborted by an earlier error"));
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
