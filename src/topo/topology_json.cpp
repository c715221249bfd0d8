#include "loom/topo/topology_json.hpp"

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>
#include <string>

#include "loom/core/error.hpp"

namespace loom::topo {

namespace {

using nlohmann::json;
constexpr const char* format_name = "loom-topology-1";
constexpr double gib = 1024.0 * 1024.0 * 1024.0;

std::string expand_name(std::string name, int i) {
  const std::string marker = "{i}";
  if (const auto at = name.find(marker); at != std::string::npos) name.replace(at, marker.size(), std::to_string(i));
  return name;
}

Host host_from(const json& j, int repeat_index) {
  Host h;
  h.name = expand_name(j.value("name", "host{i}"), repeat_index);
  h.nvswitch = j.value("nvswitch", false);
  h.pcie_gbps = j.value("pcie_gbps", 0.0);
  h.socket_link_gbps = j.value("socket_link_gbps", 0.0);
  for (const json& g : j.value("gpus", json::array())) {
    Gpu gpu;
    gpu.name = g.value("name", "");
    gpu.arch = g.value("arch", "");
    gpu.memory_bytes = static_cast<std::int64_t>(g.value("memory_gib", 0.0) * gib);
    gpu.nvlinks = g.value("nvlinks", 0);
    gpu.nvlink_gbps = g.value("nvlink_gbps", 0.0);
    gpu.socket = g.value("socket", 0);
    gpu.pci_bus_id = g.value("pci_bus_id", "");
    const int count = g.value("count", 1);  // identical GPUs may be listed once with a count
    for (int c = 0; c < count; ++c) h.gpus.push_back(gpu);
  }
  for (const json& p : j.value("nvlink_pairs", json::array())) {
    h.nvlink_pairs.push_back({p.at("a").get<int>(), p.at("b").get<int>(), p.at("links").get<int>()});
  }
  for (const json& n : j.value("nics", json::array())) {
    h.nics.push_back({n.value("name", ""), n.at("gbits").get<double>(), n.value("socket", 0)});
  }
  return h;
}

}  // namespace

Topology topology_from_json(const std::string& text, const std::string& source) {
  Topology t;
  try {
    const json j = json::parse(text);
    const std::string format = j.value("format", "");
    if (format != format_name) {
      fail(ErrorCategory::corrupt_data, "topology ", source, ": format is '", format, "', expected '", format_name, "'");
    }
    std::size_t index = 0;
    for (const json& h : j.at("hosts")) {
      const int repeat = h.value("repeat", 1);
      require(repeat >= 1, "topology ", source, ": a host repeats ", repeat, " times");
      try {
        for (int i = 0; i < repeat; ++i) t.hosts.push_back(host_from(h, i));
      } catch (const json::exception& e) {
        fail(ErrorCategory::corrupt_data, "topology ", source, ": host #", index, " (", h.value("name", "?"),
             ") has a missing or mistyped field: ", e.what());
      }
      ++index;
    }
    for (const json& r : j.value("ranks", json::array())) {
      t.ranks.push_back({r.at("host").get<int>(), r.value("gpu", -1)});
    }
  } catch (const json::exception& e) {
    fail(ErrorCategory::corrupt_data, "topology ", source, " is not valid: ", e.what());
  }
  t.validate();
  return t;
}

Topology load_topology(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorCategory::io, "cannot open topology file '", path, "'");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) fail(ErrorCategory::io, "cannot read topology file '", path, "'");
  return topology_from_json(text.str(), "file '" + path + "'");
}

std::string topology_to_json(const Topology& topology) {
  json hosts = json::array();
  for (const Host& h : topology.hosts) {
    json gpus = json::array(), pairs = json::array(), nics = json::array();
    for (const Gpu& g : h.gpus) {
      gpus.push_back({{"name", g.name}, {"arch", g.arch}, {"memory_gib", static_cast<double>(g.memory_bytes) / gib},
                      {"nvlinks", g.nvlinks}, {"nvlink_gbps", g.nvlink_gbps}, {"socket", g.socket}});
      if (!g.pci_bus_id.empty()) gpus.back()["pci_bus_id"] = g.pci_bus_id;
    }
    for (const NvLinkPair& p : h.nvlink_pairs) pairs.push_back({{"a", p.a}, {"b", p.b}, {"links", p.links}});
    for (const Nic& n : h.nics) nics.push_back({{"name", n.name}, {"gbits", n.gbits}, {"socket", n.socket}});
    hosts.push_back({{"name", h.name}, {"nvswitch", h.nvswitch}, {"pcie_gbps", h.pcie_gbps},
                     {"socket_link_gbps", h.socket_link_gbps}, {"gpus", gpus}, {"nvlink_pairs", pairs},
                     {"nics", nics}});
  }
  json out = {{"format", format_name}, {"hosts", hosts}};
  if (!topology.ranks.empty()) {
    json ranks = json::array();
    for (const RankPlace& r : topology.ranks) ranks.push_back({{"host", r.host}, {"gpu", r.gpu}});
    out["ranks"] = ranks;
  }
  return out.dump(2) + "\n";
}

}  // namespace loom::topo
