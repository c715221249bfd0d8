// loom-topo: the machine as loom sees it. Prints each host's link matrix (nvidia-smi topo -m's
// vocabulary), the job's bottleneck bandwidths, ring order and recommended gradient bucket, and a
// table of predicted time and bus bandwidth per message size for each algorithm with the planner's
// choice. Detects this machine (under mpirun/srun/torchrun: every rank's host), or reads
// --file / LOOM_TOPO_FILE; --dump writes the topology as a file to edit or simulate with.
//   build/examples/loom_topo/loom-topo --file tests/fixtures/topo/cluster-2x-dgx-a100.json
//   mpirun -np 16 build/examples/loom_topo/loom-topo --dump cluster.json
#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>
#include <set>

#include "loom/comm/launch.hpp"
#include "loom/comm/world.hpp"
#include "loom/core/error.hpp"
#include "loom/topo/detect.hpp"
#include "loom/topo/report.hpp"
#include "loom/topo/topology_json.hpp"

namespace {

std::int64_t parse_size(const std::string& text) {  // 8, 64K, 16M, 1G
  std::size_t used = 0;
  long long value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    loom::fail(loom::ErrorCategory::invalid_argument, "loom-topo: size '", text, "' is not a count with an optional K, M or G");
  }
  const std::string unit = text.substr(used);
  const std::int64_t scale = unit.empty() ? 1 : unit == "K" ? 1 << 10 : unit == "M" ? 1 << 20 : unit == "G" ? 1 << 30 : 0;
  loom::require(scale > 0 && value > 0, "loom-topo: size '", text, "' is not a count with an optional K, M or G");
  return value * scale;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("loom-topo: the topology loom sees, and the collectives' predicted cost on it");
  std::string file, dump, min_size = "8", max_size = "1G", collective = "all_reduce";
  int factor = 4;
  app.add_option("--file", file, "read this topology file instead of detecting (also LOOM_TOPO_FILE)");
  app.add_option("--dump", dump, "write the topology to this file");
  app.add_option("-b,--minbytes", min_size, "smallest message of the table");
  app.add_option("-e,--maxbytes", max_size, "largest message of the table");
  app.add_option("-f,--stepfactor", factor, "size multiplier between rows")->check(CLI::Range(2, 1024));
  app.add_option("--collective", collective)->check(CLI::IsMember({"all_reduce", "reduce_scatter", "all_gather"}));
  try {
    loom::InitOptions init = loom::parse_init_flags(argc, argv);
    CLI11_PARSE(app, argc, argv);
    std::unique_ptr<loom::World> world;
    loom::topo::Detection found;
    if (!file.empty()) {
      found.topology = loom::topo::load_topology(file);
      found.source = "--file " + file;
    } else {
      if (loom::comm::detect_launch().size > 1) world = loom::init(argc, argv, init);
      found = loom::topo::detect_topology(world ? &world->comm() : nullptr);
    }
    if (world && world->rank() != 0) return 0;
    std::printf("topology from %s\n", found.source.c_str());
    if (!found.notes.empty()) std::printf("notes: %s\n", found.notes.c_str());
    std::set<std::string> shown;  // identical hosts once
    for (const loom::topo::Host& host : found.topology.hosts) {
      loom::topo::Host unnamed = host;
      unnamed.name.clear();
      const std::string key = loom::topo::link_matrix(unnamed);
      if (!shown.insert(key).second) continue;
      std::printf("\n%s", loom::topo::link_matrix(host).c_str());
    }
    if (found.topology.hosts.size() > 1) std::printf("(%zu hosts; identical ones shown once)\n", found.topology.hosts.size());
    const loom::topo::Collective which = collective == "all_reduce"       ? loom::topo::Collective::all_reduce
                                         : collective == "reduce_scatter" ? loom::topo::Collective::reduce_scatter
                                                                          : loom::topo::Collective::all_gather;
    const loom::topo::Planner planner(found.topology);
    std::printf("\n%s", loom::topo::plan_report(planner, which,
                                                loom::topo::message_sizes(parse_size(min_size), parse_size(max_size), factor))
                            .c_str());
    if (!dump.empty()) {
      std::ofstream out(dump);
      out << loom::topo::topology_to_json(found.topology);
      loom::require(static_cast<bool>(out), "loom-topo: cannot write ", dump);
      std::printf("\nwrote %s\n", dump.c_str());
    }
    return 0;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "loom-topo: %s\n", error.what());
    return 1;
  }
}
