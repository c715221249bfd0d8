// Stop requests across processes: a signal that reaches only the last rank stops every rank at
// the same poll, with the signal's name; without one, no rank stops.
#include <catch2/catch.hpp>

#include <signal.h>

#include <chrono>
#include <thread>

#include "loom/comm/mpi.hpp"
#include "loom/train/stop.hpp"

TEST_CASE("a signal to one rank stops every rank at the same poll", "[dist][stop]") {
  std::unique_ptr<loom::comm::Communicator> comm = loom::comm::make_mpi_world_communicator();
  const loom::train::StopRequests stops;
  CHECK_FALSE(stops.poll(comm.get()));
  if (comm->rank() == comm->size() - 1) {
    raise(SIGUSR1);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const loom::train::StopRequest request = stops.poll(comm.get());
  CHECK(request.reason == loom::train::StopReason::signal);
  CHECK(request.describe() == "SIGUSR1");
  CHECK((comm->rank() == comm->size() - 1) == (request.seconds_since > 0));  // the others did not receive it
}
