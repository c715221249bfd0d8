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

// Bounds that keep a malformed file from asking for absurd amounts of memory or time.
constexpr int most_hosts = 65536, most_gpus_per_host = 1024, most_links = 1024;
constexpr double most_gbps = 1e7, most_memory_gib = 1e7;

// Field `name` of object j: an integer in [low, high] (fallback when absent), or a corrupt_data
// Error naming `where`, the field and the value.
int int_field(const json& j, const char* name, int fallback, int low, int high, const std::string& where) {
  if (!j.is_object()) fail(ErrorCategory::corrupt_data, where, " is not an object");
  if (!j.contains(name)) return fallback;
  const json& v = j.at(name);
  if (!v.is_number_integer() || v.get<std::int64_t>() < low || v.get<std::int64_t>() > high) {
    fail(ErrorCategory::corrupt_data, where, ": mistyped field '", name, "' = ", v.dump(), ": not an integer in [", low,
         ", ", high, "]");
  }
  return static_cast<int>(v.get<std::int64_t>());
}

double number_field(const json& j, const char* name, double fallback, double high, const std::string& where) {
  if (!j.is_object()) fail(ErrorCategory::corrupt_data, where, " is not an object");
  if (!j.contains(name)) return fallback;
  const json& v = j.at(name);
  if (!v.is_number() || !(v.get<double>() >= 0) || v.get<double>() > high) {
    fail(ErrorCategory::corrupt_data, where, ": mistyped field '", name, "' = ", v.dump(), ": not a number in [0, ",
         high, "]");
  }
  return v.get<double>();
}

std::string text_field(const json& j, const char* name, const std::string& fallback, const std::string& where) {
  if (!j.is_object()) fail(ErrorCategory::corrupt_data, where, " is not an object");
  if (!j.contains(name)) return fallback;
  if (!j.at(name).is_string()) {
    fail(ErrorCategory::corrupt_data, where, ": mistyped field '", name, "' = ", j.at(name).dump(), ": not a string");
  }
  return j.at(name).get<std::string>();
}

const json& array_field(const json& j, const char* name, const std::string& where) {
  static const json empty = json::array();
  if (!j.contains(name)) return empty;
  if (!j.at(name).is_array()) fail(ErrorCategory::corrupt_data, where, ": mistyped field '", name, "': not an array");
  return j.at(name);
}

Host host_from(const json& j, int repeat_index, const std::string& where) {
  Host h;
  h.name = expand_name(text_field(j, "name", "host{i}", where), repeat_index);
  if (j.contains("nvswitch") && !j.at("nvswitch").is_boolean()) {
    fail(ErrorCategory::corrupt_data, where, ": mistyped field 'nvswitch': not true or false");
  }
  h.nvswitch = j.value("nvswitch", false);
  h.pcie_gbps = number_field(j, "pcie_gbps", 0.0, most_gbps, where);
  h.socket_link_gbps = number_field(j, "socket_link_gbps", 0.0, most_gbps, where);
  for (const json& g : array_field(j, "gpus", where)) {
    const std::string gpu_where = where + ", a GPU";
    Gpu gpu;
    gpu.name = text_field(g, "name", "", gpu_where);
    gpu.arch = text_field(g, "arch", "", gpu_where);
    gpu.memory_bytes = static_cast<std::int64_t>(number_field(g, "memory_gib", 0.0, most_memory_gib, gpu_where) * gib);
    gpu.nvlinks = int_field(g, "nvlinks", 0, 0, most_links, gpu_where);
    gpu.nvlink_gbps = number_field(g, "nvlink_gbps", 0.0, most_gbps, gpu_where);
    gpu.socket = int_field(g, "socket", 0, 0, most_links, gpu_where);
    gpu.pci_bus_id = text_field(g, "pci_bus_id", "", gpu_where);
    // Identical GPUs may be listed once with a count.
    const int count = int_field(g, "count", 1, 1, most_gpus_per_host, gpu_where);
    if (static_cast<int>(h.gpus.size()) + count > most_gpus_per_host) {
      fail(ErrorCategory::corrupt_data, where, " has more than ", most_gpus_per_host, " GPUs");
    }
    for (int c = 0; c < count; ++c) h.gpus.push_back(gpu);
  }
  for (const json& p : array_field(j, "nvlink_pairs", where)) {
    const std::string pair_where = where + ", an NVLink pair";
    h.nvlink_pairs.push_back({int_field(p, "a", -1, 0, most_gpus_per_host, pair_where),
                              int_field(p, "b", -1, 0, most_gpus_per_host, pair_where),
                              int_field(p, "links", -1, 0, most_links, pair_where)});
    if (h.nvlink_pairs.back().a < 0 || h.nvlink_pairs.back().b < 0 || h.nvlink_pairs.back().links < 0) {
      fail(ErrorCategory::corrupt_data, pair_where, " needs 'a', 'b' and 'links'");
    }
  }
  for (const json& n : array_field(j, "nics", where)) {
    const std::string nic_where = where + ", a NIC";
    if (!n.is_object() || !n.contains("gbits")) fail(ErrorCategory::corrupt_data, nic_where, " needs 'gbits'");
    h.nics.push_back({text_field(n, "name", "", nic_where), number_field(n, "gbits", 0.0, most_gbps, nic_where),
                      int_field(n, "socket", 0, 0, most_links, nic_where)});
  }
  return h;
}

}  // namespace

Topology topology_from_json(const std::string& text, const std::string& source) {
  Topology t;
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail(ErrorCategory::corrupt_data, "topology ", source, " is not valid JSON: ", e.what());
  }
  const std::string where = "topology " + source;
  if (!j.is_object() || !j.contains("format") || j.at("format") != format_name) {
    const bool named = j.is_object() && j.contains("format") && j.at("format").is_string();
    fail(ErrorCategory::corrupt_data, where, ": format is '", named ? j.at("format").get<std::string>() : "", "', expected '",
         format_name, "'");
  }
  if (!j.contains("hosts") || !j.at("hosts").is_array()) {
    fail(ErrorCategory::corrupt_data, where, ": 'hosts' is missing or not an array");
  }
  std::size_t index = 0;
  for (const json& h : j.at("hosts")) {
    std::string host_where = where;
    host_where += ", host #";
    host_where += std::to_string(index);
    host_where += " (";
    host_where += h.is_object() && h.contains("name") && h.at("name").is_string() ? h.at("name").get<std::string>() : "?";
    host_where += ")";
    const int repeat = int_field(h, "repeat", 1, 1, most_hosts, host_where);
    if (static_cast<int>(t.hosts.size()) + repeat > most_hosts) {
      fail(ErrorCategory::corrupt_data, where, " has more than ", most_hosts, " hosts");
    }
    for (int i = 0; i < repeat; ++i) t.hosts.push_back(host_from(h, i, host_where));
    ++index;
  }
  for (const json& r : array_field(j, "ranks", where)) {
    const std::string rank_where = where + ", a rank";
    if (!r.is_object() || !r.contains("host")) fail(ErrorCategory::corrupt_data, rank_where, " needs 'host'");
    t.ranks.push_back({int_field(r, "host", 0, 0, most_hosts, rank_where),
                       int_field(r, "gpu", -1, -1, most_gpus_per_host, rank_where)});
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
