// Hierarchical collectives on in-process ranks: with the topology declaring the ranks as hosts x
// GPUs, loom's hierarchical all_reduce / reduce_scatter / all_gather pass the conformance suite
// every backend passes (exact results on crafted inputs, sizes 0, 1, 7 and 1003 that no rank or
// host count divides, every dtype and op, in place and out of place); ranks placed out of order
// on the hosts; a topology the schedule cannot use falls back to the flat calls.
#include <catch2/catch.hpp>

#include <string>

#include "loom/comm/in_process.hpp"
#include "loom/topo/hierarchical.hpp"
#include "loom/topo/topology_json.hpp"
#include "support/comm_conformance.hpp"
#include "support/tensor_checks.hpp"

namespace topo = loom::topo;

namespace {

topo::Topology hosts_of(int hosts, int gpus_per_host) {
  topo::Topology t;
  for (int h = 0; h < hosts; ++h) {
    topo::Host host;
    host.name = "node" + std::to_string(h);
    host.pcie_gbps = 25;
    host.gpus.assign(static_cast<std::size_t>(gpus_per_host), topo::Gpu{});
    host.nics.push_back({"eth0", 10, 0});
    t.hosts.push_back(host);
  }
  return t;
}

std::vector<std::string> conformance_through(const topo::Topology& topology, topo::AlgorithmChoice choice,
                                             std::int64_t large = 0) {
  const int ranks = topology.world_size();
  std::vector<std::string> failures(static_cast<std::size_t>(ranks));
  loom::comm::run_in_process(ranks, [&](loom::comm::Communicator& flat) {
    auto aware = topo::make_topology_aware(flat, topology, choice);
    failures[static_cast<std::size_t>(flat.rank())] = loom::test::run_comm_conformance(*aware, {{0, 1, 7, 1003}, large});
  });
  return failures;
}

}  // namespace

TEST_CASE("hierarchical collectives equal the flat ones on crafted inputs", "[topo][comm]") {
  struct Layout {
    int hosts, gpus;
  };
  for (const Layout layout : {Layout{2, 2}, Layout{3, 2}, Layout{2, 3}}) {
    INFO(layout.hosts << " hosts x " << layout.gpus << " GPUs");
    for (const std::string& failure : conformance_through(hosts_of(layout.hosts, layout.gpus),
                                                          topo::AlgorithmChoice::hierarchical)) {
      INFO(failure);
      CHECK(failure.empty());
    }
  }
}

TEST_CASE("hierarchical collectives with ranks interleaved across hosts", "[topo][comm]") {
  topo::Topology t = hosts_of(2, 2);
  t.ranks = {{0, 0}, {1, 0}, {0, 1}, {1, 1}};  // round-robin placement: ranks 0 and 2 share node0
  for (const std::string& failure : conformance_through(t, topo::AlgorithmChoice::hierarchical)) {
    INFO(failure);
    CHECK(failure.empty());
  }
}

TEST_CASE("rings through NVLink bridges: local ranks follow the planner's order", "[topo][comm]") {
  // Two bridged PCIe servers: inside each host the ring order is 0 2 1 3, so local index and rank
  // order differ, and the permutations must still deliver every block to its rank.
  const topo::Topology bridged =
      topo::load_topology(std::string(LOOM_SOURCE_DIR) + "/tests/fixtures/topo/cluster-2x-pcie-4gpu.json");
  REQUIRE(topo::Planner(bridged).ring_orders()[0] == std::vector<int>{0, 2, 1, 3});
  for (const std::string& failure : conformance_through(bridged, topo::AlgorithmChoice::hierarchical)) {
    INFO(failure);
    CHECK(failure.empty());
  }
}

TEST_CASE("the declared 2 nodes x 2 GPUs fixture drives the automatic choice, and uneven hosts stay flat", "[topo][comm]") {
  const topo::Topology fixture =
      topo::load_topology(std::string(LOOM_SOURCE_DIR) + "/tests/fixtures/topo/two-nodes-two-gpus.json");
  // The planner sends small messages to the flat call and large ones (the 20001-element sum, 80 KB
  // in f32) to the hierarchical schedule: one run mixes both, in order.
  const topo::Planner planner(fixture);
  CHECK(planner.choose(topo::Collective::all_reduce, 1003 * 4).algorithm != topo::Algorithm::hierarchical);
  CHECK(planner.choose(topo::Collective::all_reduce, 20001 * 4).algorithm == topo::Algorithm::hierarchical);
  for (const std::string& failure : conformance_through(fixture, topo::AlgorithmChoice::automatic, 20001)) {
    INFO(failure);
    CHECK(failure.empty());
  }
  topo::Topology uneven = hosts_of(2, 2);
  uneven.hosts[1].gpus.pop_back();  // 2 + 1 ranks: no common shape
  for (const std::string& failure : conformance_through(uneven, topo::AlgorithmChoice::automatic)) {
    INFO(failure);
    CHECK(failure.empty());  // every call flat
  }
  std::vector<std::string> refused(3);
  loom::comm::run_in_process(3, [&](loom::comm::Communicator& flat) {
    refused[static_cast<std::size_t>(flat.rank())] = loom::test::error_of(
        [&] { topo::make_topology_aware(flat, uneven, topo::AlgorithmChoice::hierarchical); });
  });
  for (const std::string& e : refused) CHECK(e.find("hier was asked for") != std::string::npos);
}

TEST_CASE("ranks that disagree on the topology are refused on every rank", "[topo][comm]") {
  std::vector<std::string> errors(4);
  loom::comm::run_in_process(4, [&](loom::comm::Communicator& flat) {
    topo::Topology t = hosts_of(2, 2);
    if (flat.rank() == 3) t.hosts[1].nics[0].gbits = 100;  // rank 3 detected a different network
    errors[static_cast<std::size_t>(flat.rank())] =
        loom::test::error_of([&] { topo::make_topology_aware(flat, t, topo::AlgorithmChoice::automatic); });
  });
  for (const std::string& e : errors) CHECK(e.find("the topology differs between the ranks") != std::string::npos);
  CHECK_THROWS_MATCHES(topo::parse_algorithm_choice("fast"), loom::Error,
                       loom::test::IsError(loom::ErrorCategory::invalid_argument, {"'fast' is not flat, hier or auto"}));
}
