// Topology files: the fixtures load, round-trip through the dump, expand repeated hosts, and bad
// files are refused naming the problem; placement and NVLink queries.
#include <catch2/catch.hpp>

#include <string>

#include "loom/topo/topology_json.hpp"
#include "support/tensor_checks.hpp"

using loom::ErrorCategory;
using loom::test::IsError;
namespace topo = loom::topo;

namespace {
std::string fixture(const std::string& name) { return std::string(LOOM_SOURCE_DIR) + "/tests/fixtures/topo/" + name; }
}  // namespace

TEST_CASE("the topology fixtures load and describe the machines they name", "[topo]") {
  const topo::Topology a100 = topo::load_topology(fixture("dgx-a100.json"));
  REQUIRE(a100.hosts.size() == 1);
  REQUIRE(a100.hosts[0].gpus.size() == 8);
  CHECK(a100.hosts[0].nvswitch);
  CHECK(a100.hosts[0].gpus[0].nvlinks == 12);
  CHECK(a100.hosts[0].gpus[0].arch == "sm_80");
  CHECK(a100.hosts[0].gpus[7].socket == 1);
  CHECK(a100.hosts[0].nics.size() == 8);
  CHECK(topo::nvlinks_between(a100.hosts[0], 0, 5) == 12);  // NVSwitch: any pair at full links
  CHECK(a100.world_size() == 8);

  const topo::Topology pcie = topo::load_topology(fixture("pcie-4gpu-bridged.json"));
  CHECK_FALSE(pcie.hosts[0].nvswitch);
  CHECK(topo::nvlinks_between(pcie.hosts[0], 0, 2) == 12);
  CHECK(topo::nvlinks_between(pcie.hosts[0], 2, 0) == 12);
  CHECK(topo::nvlinks_between(pcie.hosts[0], 0, 1) == 0);

  const topo::Topology cluster = topo::load_topology(fixture("cluster-16x-hgx-h100.json"));
  REQUIRE(cluster.hosts.size() == 16);
  CHECK(cluster.hosts[0].name == "hgx-h100-0");
  CHECK(cluster.hosts[15].name == "hgx-h100-15");
  CHECK(cluster.world_size() == 128);
  const auto places = cluster.placement();
  CHECK(places[9].host == 1);
  CHECK(places[9].gpu == 1);
  for (const char* name : {"hgx-h100.json", "cluster-2x-dgx-a100.json", "cluster-2x-a100-cloud.json",
                           "cluster-16x-a100-cloud.json", "cluster-2x-pcie-4gpu.json",
                           "cluster-16x-pcie-4gpu.json", "two-nodes-two-gpus.json"}) {
    INFO(name);
    CHECK_NOTHROW(topo::load_topology(fixture(name)));
  }
}

TEST_CASE("a topology survives a dump and a load", "[topo]") {
  for (const char* name : {"cluster-2x-dgx-a100.json", "pcie-4gpu-bridged.json"}) {
    const topo::Topology first = topo::load_topology(fixture(name));
    const std::string dumped = topo::topology_to_json(first);
    const topo::Topology second = topo::topology_from_json(dumped);
    CHECK(topo::topology_to_json(second) == dumped);
    CHECK(second.world_size() == first.world_size());
  }
  topo::Topology placed = topo::load_topology(fixture("two-nodes-two-gpus.json"));
  placed.ranks = {{1, 0}, {0, 1}};
  const topo::Topology back = topo::topology_from_json(topo::topology_to_json(placed));
  REQUIRE(back.ranks.size() == 2);
  CHECK(back.ranks[0].host == 1);
  CHECK(back.ranks[1].gpu == 1);
}

TEST_CASE("bad topology files are refused, naming the problem", "[topo]") {
  CHECK_THROWS_MATCHES(topo::topology_from_json("{\"format\": \"other\", \"hosts\": []}"), loom::Error,
                       IsError(ErrorCategory::corrupt_data, {"format is 'other'", "loom-topology-1"}));
  CHECK_THROWS_MATCHES(topo::topology_from_json(R"({"format": "loom-topology-1", "hosts": [{"name": "h", "pcie_gbps": "25"}]})"),
                       loom::Error, IsError(ErrorCategory::corrupt_data, {"host #0 (h)", "mistyped field"}));
  CHECK_THROWS_MATCHES(topo::topology_from_json("{\"format\": \"loom-topology-1\"}"), loom::Error,
                       IsError(ErrorCategory::corrupt_data, {"hosts"}));
  CHECK_THROWS_MATCHES(topo::topology_from_json("not json"), loom::Error, IsError(ErrorCategory::corrupt_data, {"not valid"}));
  // Values that would ask for absurd memory or overflow a conversion (found by fuzz/topology_json).
  CHECK_THROWS_MATCHES(topo::topology_from_json(R"({"format": "loom-topology-1", "hosts": [{"repeat": 2000000000}]})"),
                       loom::Error, IsError(ErrorCategory::corrupt_data, {"'repeat' = 2000000000", "[1, 65536]"}));
  CHECK_THROWS_MATCHES(
      topo::topology_from_json(R"({"format": "loom-topology-1", "hosts": [{"gpus": [{"memory_gib": 1e300}]}]})"),
      loom::Error, IsError(ErrorCategory::corrupt_data, {"a GPU", "'memory_gib' = 1e+300"}));
  CHECK_THROWS_MATCHES(
      topo::topology_from_json(R"({"format": "loom-topology-1", "hosts": [{"gpus": [{"count": 1000}, {"count": 1000}]}]})"),
      loom::Error, IsError(ErrorCategory::corrupt_data, {"more than 1024 GPUs"}));
  CHECK_THROWS_MATCHES(topo::topology_from_json(R"({"format": "loom-topology-1", "hosts": [{"nics": [{"socket": 0}]}]})"),
                       loom::Error, IsError(ErrorCategory::corrupt_data, {"a NIC", "gbits"}));
  const std::string bad_pair = R"({"format": "loom-topology-1", "hosts": [{"name": "h", "gpus": [{"count": 2}],
      "nvlink_pairs": [{"a": 0, "b": 5, "links": 4}]}]})";
  CHECK_THROWS_MATCHES(topo::topology_from_json(bad_pair), loom::Error,
                       IsError(ErrorCategory::invalid_argument, {"NVLink pair (0, 5, 4 links)", "2 GPUs"}));
  const std::string bad_rank = R"({"format": "loom-topology-1", "hosts": [{"name": "h"}],
      "ranks": [{"host": 3}]})";
  CHECK_THROWS_MATCHES(topo::topology_from_json(bad_rank), loom::Error,
                       IsError(ErrorCategory::invalid_argument, {"rank 0 is on host 3", "1 hosts"}));
  CHECK_THROWS_MATCHES(topo::load_topology("/nonexistent/topo.json"), loom::Error, IsError(ErrorCategory::io));
}
