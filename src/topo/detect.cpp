#include "loom/topo/detect.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "loom/core/error.hpp"
#include "loom/core/gpu_info.hpp"
#include "loom/core/tensor.hpp"
#include "loom/topo/topology_json.hpp"
#include "loom/comm/agreement.hpp"
#include "src/topo/nvml.hpp"

namespace loom::topo {

namespace {

namespace fs = std::filesystem;

constexpr double unknown_pcie_gbps = 16;  // PCIe 3 x16, when the generation cannot be read

std::string read_line(const fs::path& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

int numa_node(const fs::path& device_dir) {
  const std::string text = read_line(device_dir / "numa_node");
  const int node = text.empty() ? 0 : std::atoi(text.c_str());
  return node < 0 ? 0 : node;
}

// NVLink per-link bandwidth per direction by generation, from the architecture: NVLink2 (Volta),
// NVLink3 (Ampere) and NVLink4 (Hopper) carry 25 GB/s per link; NVLink5 (Blackwell) 50.
double nvlink_gbps_for(int major) { return major >= 10 ? 50.0 : 25.0; }

// PCIe GB/s per direction per lane by generation (after line coding); 0 when unknown.
double pcie_lane_gbps(unsigned generation) {
  switch (generation) {
    case 1: return 0.25;
    case 2: return 0.5;
    case 3: return 0.985;
    case 4: return 1.969;
    case 5: return 3.938;
    case 6: return 7.877;
    default: return 0;
  }
}

// "00000000:07:00.0" (NVML) and "0000:07:00.0" (CUDA, sysfs) name the same device.
std::string short_bus_id(const std::string& id) {
  std::string s = id.size() > 12 ? id.substr(id.size() - 12) : id;
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

void add_nics(Host& host) {
  std::error_code ec;
  for (const auto& device : fs::directory_iterator("/sys/class/infiniband", ec)) {
    for (const auto& port : fs::directory_iterator(device.path() / "ports", ec)) {
      // Only ports that are up and active carry traffic.
      if (read_line(port.path() / "state").find("ACTIVE") == std::string::npos) continue;
      if (read_line(port.path() / "phys_state").find("LinkUp") == std::string::npos) continue;
      const double gbits = std::atof(read_line(port.path() / "rate").c_str());  // "200 Gb/sec (4X HDR)"
      if (gbits > 0) {
        host.nics.push_back({device.path().filename().string() + "/" + port.path().filename().string(), gbits,
                             numa_node(device.path() / "device")});
      }
    }
  }
  if (!host.nics.empty()) return;
  for (const auto& entry : fs::directory_iterator("/sys/class/net", ec)) {
    if (!fs::exists(entry.path() / "device")) continue;  // virtual interfaces (lo, bridges, veth)
    if (read_line(entry.path() / "operstate") != "up") continue;
    const double mbits = std::atof(read_line(entry.path() / "speed").c_str());
    if (mbits > 0) host.nics.push_back({entry.path().filename().string(), mbits / 1000.0, numa_node(entry.path() / "device")});
  }
}

void add_gpus(Host& host, std::string& notes) {
  std::string why;
  const std::vector<detail::NvmlGpu> gpus = detail::query_nvml(why);
  if (!gpus.empty()) {
    std::map<std::string, int> index_of;
    for (std::size_t i = 0; i < gpus.size(); ++i) index_of[short_bus_id(gpus[i].bus_id)] = static_cast<int>(i);
    std::map<std::pair<int, int>, int> pair_links;
    bool unknown_pcie = false;
    for (std::size_t i = 0; i < gpus.size(); ++i) {
      const detail::NvmlGpu& g = gpus[i];
      Gpu gpu;
      gpu.name = g.name;
      gpu.arch = g.major > 0 ? "sm_" + std::to_string(g.major * 10 + g.minor) : "";
      gpu.memory_bytes = static_cast<std::int64_t>(g.memory_bytes);
      gpu.pci_bus_id = short_bus_id(g.bus_id);
      gpu.socket = numa_node(fs::path("/sys/bus/pci/devices") / gpu.pci_bus_id);
      for (const std::string& peer : g.nvlink_peers) {
        if (peer == "switch") {
          host.nvswitch = true;
          ++gpu.nvlinks;
        } else if (const auto found = index_of.find(short_bus_id(peer)); found != index_of.end()) {
          ++gpu.nvlinks;
          if (found->second > static_cast<int>(i)) ++pair_links[{static_cast<int>(i), found->second}];
        }  // a link to a GPU this process cannot see counts for neither
      }
      gpu.nvlink_gbps = gpu.nvlinks > 0 ? nvlink_gbps_for(g.major) : 0;
      const double pcie = pcie_lane_gbps(g.pcie_generation) * g.pcie_width;
      unknown_pcie = unknown_pcie || pcie <= 0;
      host.pcie_gbps = std::max(host.pcie_gbps, pcie);
      host.gpus.push_back(gpu);
    }
    if (!host.nvswitch) {
      for (const auto& [pair, links] : pair_links) host.nvlink_pairs.push_back({pair.first, pair.second, links});
    }
    if (unknown_pcie && host.pcie_gbps <= 0) {
      host.pcie_gbps = unknown_pcie_gbps;
      notes += "PCIe generation unknown: assumed " + std::to_string(static_cast<int>(unknown_pcie_gbps)) + " GB/s. ";
    }
    return;
  }
  notes += "NVML: " + why + ". ";
  const CudaRuntimeStatus cuda = cuda_runtime_status();
  for (int i = 0; i < cuda.device_count; ++i) {
    const CudaDeviceProperties p = cuda_device_properties(i);
    Gpu gpu;
    gpu.name = p.name;
    gpu.arch = "sm_" + std::to_string(p.compute_major * 10 + p.compute_minor);
    gpu.memory_bytes = static_cast<std::int64_t>(p.total_memory_bytes);
    gpu.pci_bus_id = short_bus_id(p.pci_bus_id);
    gpu.socket = numa_node(fs::path("/sys/bus/pci/devices") / gpu.pci_bus_id);
    host.gpus.push_back(gpu);
  }
  if (cuda.device_count > 0) {
    host.pcie_gbps = unknown_pcie_gbps;
    // CUDA's peer attributes tell NVLink from PCIe (native atomics cross NVLink only) but not how
    // many links: one is assumed, a lower bound.
    for (int a = 0; a < cuda.device_count; ++a) {
      for (int b = a + 1; b < cuda.device_count; ++b) {
        if (!cuda_peer_link(a, b).native_atomics) continue;
        host.nvlink_pairs.push_back({a, b, 1});
        for (const int g : {a, b}) {
          host.gpus[static_cast<std::size_t>(g)].nvlinks += 1;
          host.gpus[static_cast<std::size_t>(g)].nvlink_gbps = nvlink_gbps_for(cuda_device_properties(g).compute_major);
        }
      }
    }
    notes += "GPUs from the CUDA runtime; NVLink pairs from its peer attributes, one link each assumed; PCIe assumed " +
             std::to_string(static_cast<int>(unknown_pcie_gbps)) + " GB/s. ";
  } else {
    notes += "No GPUs (" + cuda.reason + "): nodes only. ";
  }
}

std::string hostname() {
  std::array<char, 256> name{};
  if (gethostname(name.data(), name.size() - 1) != 0) return "localhost";
  return name.data();
}

// What identifies a machine: its name and this boot (containers may share a name).
std::string machine_identity() { return hostname() + " " + read_line("/proc/sys/kernel/random/boot_id"); }

std::string lines(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& p : parts) out += p + "\n";
  return out;
}

}  // namespace

Host detect_host(std::string& notes) {
  Host host;
  host.name = hostname();
  add_gpus(host, notes);
  add_nics(host);
  if (host.nics.empty()) notes += "No network interface with a known speed. ";
  return host;
}

Detection detect_topology(comm::Communicator* world) {
  Detection d;
  const char* file = std::getenv("LOOM_TOPO_FILE");
  const std::string file_name = file != nullptr ? file : "";
  if (world == nullptr) {
    if (!file_name.empty()) {
      d.topology = load_topology(file_name);
      d.source = "LOOM_TOPO_FILE=" + file_name;
    } else {
      d.topology.hosts.push_back(detect_host(d.notes));
      d.source = d.topology.hosts[0].gpus.empty() ? "host name (no GPUs)" : "NVML and sysfs";
    }
    return d;
  }
  // Every rank takes part in the same collectives whatever it finds, so that no rank waits alone.
  // Each says which topology file it was given; all must agree.
  const std::vector<std::string> files = comm::all_gather_texts(*world, file_name);
  for (int r = 0; r < world->size(); ++r) {
    require(files[static_cast<std::size_t>(r)] == files[0], "LOOM_TOPO_FILE is '", files[0], "' on rank 0 but '",
            files[static_cast<std::size_t>(r)], "' on rank ", r, ": set it for every rank (mpirun -x LOOM_TOPO_FILE)");
  }
  if (!file_name.empty()) {
    d.topology = load_topology(file_name);
    d.source = "LOOM_TOPO_FILE=" + file_name;
    require(d.topology.world_size() == world->size(), "LOOM_TOPO_FILE ", file_name, " places ",
            d.topology.world_size(), " ranks but the job has ", world->size());
    return d;
  }
  // Each rank describes its machine and GPU; every rank then builds the same topology from all
  // descriptions: hosts in order of their first rank, each as its first rank detected it.
  std::string notes;
  Topology local;
  local.hosts.push_back(detect_host(notes));
  const std::string gpu_bus =
      world->device().is_cuda() ? short_bus_id(cuda_device_properties(world->device().index()).pci_bus_id) : "";
  const std::vector<std::string> records =
      comm::all_gather_texts(*world, lines({machine_identity(), gpu_bus, notes}) + topology_to_json(local));
  std::map<std::string, int> host_of;
  for (int r = 0; r < world->size(); ++r) {
    const std::string& record = records[static_cast<std::size_t>(r)];
    std::size_t at = 0;
    auto next_line = [&] {
      const std::size_t end = record.find('\n', at);
      std::string line = record.substr(at, end - at);
      at = end + 1;
      return line;
    };
    const std::string identity = next_line(), bus = next_line(), rank_notes = next_line();
    auto [it, added] = host_of.try_emplace(identity, static_cast<int>(d.topology.hosts.size()));
    if (added) {
      d.topology.hosts.push_back(topology_from_json(record.substr(at), "of rank " + std::to_string(r)).hosts.at(0));
      if (!rank_notes.empty()) d.notes += "host " + d.topology.hosts.back().name + ": " + rank_notes;
    }
    const Host& host = d.topology.hosts[static_cast<std::size_t>(it->second)];
    int gpu = -1;
    for (std::size_t g = 0; g < host.gpus.size() && !bus.empty(); ++g) {
      if (host.gpus[g].pci_bus_id == bus) gpu = static_cast<int>(g);
    }
    d.topology.ranks.push_back({it->second, gpu});
  }
  d.source = local.hosts[0].gpus.empty() ? "host names (no GPUs)" : "NVML and sysfs of every host";
  d.topology.validate();
  return d;
}

}  // namespace loom::topo
