// Detection degrades cleanly: on any machine it returns a valid topology of this host (on this
// project's CPU test machines: no GPUs, a note saying why); LOOM_TOPO_FILE replaces it and must
// place as many ranks as the job has; with a communicator every rank is placed on its host.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "loom/comm/in_process.hpp"
#include "loom/topo/detect.hpp"
#include "support/tensor_checks.hpp"

namespace topo = loom::topo;

namespace {

// Sets (or clears) LOOM_TOPO_FILE for one scope.
class TopoFileVariable {
 public:
  explicit TopoFileVariable(const char* value) {
    if (const char* old = std::getenv("LOOM_TOPO_FILE")) saved_ = old;
    if (value != nullptr) setenv("LOOM_TOPO_FILE", value, 1);
    else unsetenv("LOOM_TOPO_FILE");
  }
  ~TopoFileVariable() {
    if (saved_.empty()) unsetenv("LOOM_TOPO_FILE");
    else setenv("LOOM_TOPO_FILE", saved_.c_str(), 1);
  }

 private:
  std::string saved_;
};

}  // namespace

TEST_CASE("detection describes this host, with or without GPUs", "[topo]") {
  const TopoFileVariable none(nullptr);
  const topo::Detection d = topo::detect_topology();
  REQUIRE(d.topology.hosts.size() == 1);
  CHECK_FALSE(d.topology.hosts[0].name.empty());
  CHECK_NOTHROW(d.topology.validate());
  if (d.topology.hosts[0].gpus.empty()) {
    CHECK(d.notes.find("No GPUs") != std::string::npos);  // says why: nodes only
    CHECK(d.topology.world_size() == 1);
  }
}

TEST_CASE("LOOM_TOPO_FILE replaces detection and must match the job", "[topo]") {
  const std::string file = std::string(LOOM_SOURCE_DIR) + "/tests/fixtures/topo/two-nodes-two-gpus.json";
  const TopoFileVariable set(file.c_str());
  const topo::Detection alone = topo::detect_topology();
  CHECK(alone.source == "LOOM_TOPO_FILE=" + file);
  CHECK(alone.topology.world_size() == 4);
  std::vector<std::string> errors(3);
  loom::comm::run_in_process(3, [&](loom::comm::Communicator& comm) {
    errors[static_cast<std::size_t>(comm.rank())] = loom::test::error_of([&] { topo::detect_topology(&comm); });
  });
  for (const std::string& e : errors) CHECK(e.find("places 4 ranks but the job has 3") != std::string::npos);
}

TEST_CASE("with a communicator, every rank is placed on its host", "[topo]") {
  const TopoFileVariable none(nullptr);
  std::vector<topo::Topology> seen(3);
  loom::comm::run_in_process(3, [&](loom::comm::Communicator& comm) {
    seen[static_cast<std::size_t>(comm.rank())] = topo::detect_topology(&comm).topology;
  });
  for (const topo::Topology& t : seen) {
    REQUIRE(t.hosts.size() == 1);  // threads of one process share its host
    REQUIRE(t.ranks.size() == 3);
    for (const topo::RankPlace& p : t.ranks) {
      CHECK(p.host == 0);
      CHECK(p.gpu == -1);  // CPU communicators
    }
  }
}
