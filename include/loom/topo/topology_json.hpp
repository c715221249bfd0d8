// The topology file format (JSON), what LOOM_TOPO_FILE names and `loom-topo --dump` writes:
//   {"format": "loom-topology-1",
//    "hosts": [{"name": "node0", "nvswitch": true, "pcie_gbps": 25, "socket_link_gbps": 40,
//               "gpus": [{"name": "NVIDIA A100-SXM4-80GB", "arch": "sm_80", "memory_gib": 80,
//                         "nvlinks": 12, "nvlink_gbps": 25, "socket": 0}, ...],
//               "nvlink_pairs": [{"a": 0, "b": 1, "links": 4}],
//               "nics": [{"name": "mlx5_0", "gbits": 200, "socket": 0}]}],
//    "ranks": [{"host": 0, "gpu": 0}, ...]}          (optional: one rank per GPU by default)
// Hosts may repeat: {"repeat": 16, "name": "node{i}", ...} stands for 16 hosts named node0..node15.
#pragma once

#include <string>

#include "loom/topo/topology.hpp"

namespace loom::topo {

// Throws corrupt_data naming the field for malformed JSON or fields, then validates.
Topology topology_from_json(const std::string& text, const std::string& source = "topology");
Topology load_topology(const std::string& path);
std::string topology_to_json(const Topology& topology);  // pretty-printed, hosts written out

}  // namespace loom::topo
