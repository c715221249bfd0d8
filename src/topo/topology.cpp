#include "loom/topo/topology.hpp"

#include <algorithm>

#include "loom/core/error.hpp"

namespace loom::topo {

std::vector<RankPlace> Topology::placement() const {
  if (!ranks.empty()) return ranks;
  std::vector<RankPlace> out;
  for (std::size_t h = 0; h < hosts.size(); ++h) {
    if (hosts[h].gpus.empty()) out.push_back({static_cast<int>(h), -1});
    for (std::size_t g = 0; g < hosts[h].gpus.size(); ++g) out.push_back({static_cast<int>(h), static_cast<int>(g)});
  }
  return out;
}

void Topology::validate() const {
  require(!hosts.empty(), "topology: no hosts");
  for (std::size_t h = 0; h < hosts.size(); ++h) {
    const Host& host = hosts[h];
    const auto gpus = static_cast<int>(host.gpus.size());
    require(host.pcie_gbps >= 0 && host.socket_link_gbps >= 0, "topology: host '", host.name,
            "' has a negative PCIe or socket-link bandwidth");
    for (const Gpu& gpu : host.gpus) {
      require(gpu.nvlinks >= 0 && gpu.nvlink_gbps >= 0 && (gpu.nvlinks == 0 || gpu.nvlink_gbps > 0),
              "topology: a GPU of host '", host.name, "' has ", gpu.nvlinks, " NVLinks of ", gpu.nvlink_gbps,
              " GB/s: links need a positive bandwidth");
    }
    for (const NvLinkPair& pair : host.nvlink_pairs) {
      require(pair.a >= 0 && pair.a < gpus && pair.b >= 0 && pair.b < gpus && pair.a != pair.b && pair.links > 0,
              "topology: host '", host.name, "' has an NVLink pair (", pair.a, ", ", pair.b, ", ", pair.links,
              " links) that does not name two of its ", gpus, " GPUs with at least one link");
    }
    for (const Nic& nic : host.nics) {
      require(nic.gbits > 0, "topology: NIC '", nic.name, "' of host '", host.name, "' has no bandwidth");
    }
  }
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    const RankPlace& p = ranks[r];
    require(p.host >= 0 && p.host < static_cast<int>(hosts.size()), "topology: rank ", r, " is on host ", p.host,
            " but there are ", hosts.size(), " hosts");
    require(p.gpu >= -1 && p.gpu < static_cast<int>(hosts[static_cast<std::size_t>(p.host)].gpus.size()),
            "topology: rank ", r, " uses GPU ", p.gpu, " of host '", hosts[static_cast<std::size_t>(p.host)].name,
            "', which has ", hosts[static_cast<std::size_t>(p.host)].gpus.size(), " GPUs");
  }
}

int nvlinks_between(const Host& host, int a, int b) {
  if (a < 0 || b < 0 || a == b) return 0;
  const Gpu& ga = host.gpus.at(static_cast<std::size_t>(a));
  const Gpu& gb = host.gpus.at(static_cast<std::size_t>(b));
  if (host.nvswitch) return std::min(ga.nvlinks, gb.nvlinks);
  int links = 0;
  for (const NvLinkPair& pair : host.nvlink_pairs) {
    if ((pair.a == a && pair.b == b) || (pair.a == b && pair.b == a)) links += pair.links;
  }
  return links;
}

}  // namespace loom::topo
