// Hierarchical collectives across MPI processes. CTest runs this case as dist.mpi.np4.topo with
// LOOM_TOPO_FILE declaring the 4 ranks as 2 nodes x 2 GPUs (tests/fixtures/topo): the topology comes
// from detect_topology, as in a real job, and the hierarchical all_reduce / reduce_scatter /
// all_gather pass the conformance suite (exact results, sizes no rank or host count divides).
// Without LOOM_TOPO_FILE (the plain dist runs) the detected topology is one host, every call stays
// flat, and the suite must pass all the same.
#include <catch2/catch.hpp>

#include <cstdlib>

#include "loom/comm/mpi.hpp"
#include "loom/ddp/replicas.hpp"
#include "loom/topo/detect.hpp"
#include "loom/topo/hierarchical.hpp"
#include "support/comm_conformance.hpp"

TEST_CASE("hierarchical collectives across processes equal the flat ones", "[dist][topo]") {
  std::unique_ptr<loom::comm::Communicator> flat = loom::comm::make_mpi_world_communicator();
  const loom::topo::Detection detected = loom::topo::detect_topology(flat.get());
  const bool declared = std::getenv("LOOM_TOPO_FILE") != nullptr;
  if (declared) {
    REQUIRE(detected.topology.hosts.size() == 2);
    REQUIRE(detected.topology.world_size() == 4);
  }
  // One detected host cannot be hierarchical (asking for it is an error); automatic stays flat.
  auto aware = loom::topo::make_topology_aware(
      *flat, detected.topology, declared ? loom::topo::AlgorithmChoice::hierarchical : loom::topo::AlgorithmChoice::automatic);
  const std::string failure = loom::test::run_comm_conformance(*aware, {{0, 1, 7, 1003}, 0});
  INFO(failure);
  // Every rank agrees before asserting, so that no rank leaves while others still communicate.
  REQUIRE(loom::ddp::mean_across_ranks(*flat, failure.empty() ? 0.0 : 1.0) == 0.0);
}
