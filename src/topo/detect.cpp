#include "loom/topo/detect.hpp"

#include <unistd.h>

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
#include "src/topo/nvml.hpp"

namespace loom::topo {

namespace {

namespace fs = std::filesystem;

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

// PCIe GB/s per direction per lane by generation (after line coding).
double pcie_lane_gbps(unsigned generation) {
  switch (generation) {
    case 3: return 0.985;
    case 4: return 1.969;
    case 5: return 3.938;
    case 6: return 7.877;
    default: return 0;
  }
}

std::string lower_bus_id(std::string id) {
  for (char& c : id) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return id;
}

void add_nics(Host& host) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/sys/class/infiniband", ec)) {
    const std::string rate = read_line(entry.path() / "ports" / "1" / "rate");  // "200 Gb/sec (4X HDR)"
    const double gbits = std::atof(rate.c_str());
    if (gbits > 0) host.nics.push_back({entry.path().filename().string(), gbits, numa_node(entry.path() / "device")});
  }
  if (!host.nics.empty()) return;
  for (const auto& entry : fs::directory_iterator("/sys/class/net", ec)) {
    if (!fs::exists(entry.path() / "device")) continue;  // virtual interfaces (lo, bridges, veth)
    const double mbits = std::atof(read_line(entry.path() / "speed").c_str());
    if (mbits > 0) host.nics.push_back({entry.path().filename().string(), mbits / 1000.0, numa_node(entry.path() / "device")});
  }
}

void add_gpus(Host& host, std::string& notes) {
  std::string why;
  const std::vector<detail::NvmlGpu> gpus = detail::query_nvml(why);
  if (!gpus.empty()) {
    std::map<std::string, int> index_of;
    for (std::size_t i = 0; i < gpus.size(); ++i) index_of[lower_bus_id(gpus[i].bus_id)] = static_cast<int>(i);
    std::map<std::pair<int, int>, int> pair_links;
    for (std::size_t i = 0; i < gpus.size(); ++i) {
      const detail::NvmlGpu& g = gpus[i];
      Gpu gpu;
      gpu.name = g.name;
      gpu.arch = "sm_" + std::to_string(g.major * 10 + g.minor);
      gpu.memory_bytes = static_cast<std::int64_t>(g.memory_bytes);
      gpu.nvlinks = static_cast<int>(g.nvlink_peers.size());
      gpu.nvlink_gbps = gpu.nvlinks > 0 ? nvlink_gbps_for(g.major) : 0;
      gpu.socket = numa_node(fs::path("/sys/bus/pci/devices") / lower_bus_id(g.bus_id.substr(g.bus_id.size() >= 12 ? g.bus_id.size() - 12 : 0)));
      host.gpus.push_back(gpu);
      host.pcie_gbps = std::max(host.pcie_gbps, pcie_lane_gbps(g.pcie_generation) * g.pcie_width);
      for (const std::string& peer : g.nvlink_peers) {
        const auto found = index_of.find(lower_bus_id(peer));
        if (found == index_of.end()) host.nvswitch = true;  // the far end is not a GPU: an NVSwitch
        else if (found->second > static_cast<int>(i)) ++pair_links[{static_cast<int>(i), found->second}];
      }
    }
    if (!host.nvswitch) {
      for (const auto& [pair, links] : pair_links) host.nvlink_pairs.push_back({pair.first, pair.second, links});
    }
    return;
  }
  notes += "NVML: " + why + ". ";
  const CudaRuntimeStatus cuda = cuda_runtime_status();
  for (int i = 0; i < cuda.device_count; ++i) {
    const CudaDeviceProperties p = cuda_device_properties(i);
    host.gpus.push_back({p.name, "sm_" + std::to_string(p.compute_major * 10 + p.compute_minor),
                         static_cast<std::int64_t>(p.total_memory_bytes), 0, 0, 0});
  }
  if (cuda.device_count > 0) notes += "GPUs from the CUDA runtime, without their links. ";
  else notes += "No GPUs (" + cuda.reason + "): nodes only. ";
}

std::string hostname() {
  std::array<char, 256> name{};
  if (gethostname(name.data(), name.size() - 1) != 0) return "localhost";
  return name.data();
}

// Every rank's host name and GPU index (-1: CPU), gathered through the communicator.
std::vector<std::pair<std::string, int>> gather_places(comm::Communicator& world) {
  constexpr std::size_t words = 33;  // 256 bytes of name + the GPU index
  std::vector<std::int64_t> mine(words, 0);
  const std::string name = hostname();
  std::memcpy(mine.data(), name.data(), std::min<std::size_t>(name.size(), 255));
  mine[words - 1] = world.device().is_cuda() ? world.device().index() : -1;
  const Tensor input = Tensor::from_vector(mine, {static_cast<std::int64_t>(words)}).to(world.device());
  const Tensor output = Tensor::empty({static_cast<std::int64_t>(words) * world.size()}, DType::i64, world.device());
  world.all_gather(input, output).wait();
  const std::vector<std::int64_t> all = output.to(Device::cpu()).to_vector<std::int64_t>();
  std::vector<std::pair<std::string, int>> places;
  for (int r = 0; r < world.size(); ++r) {
    const std::int64_t* record = all.data() + static_cast<std::size_t>(r) * words;
    places.emplace_back(std::string(reinterpret_cast<const char*>(record)), static_cast<int>(record[words - 1]));
  }
  return places;
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
  if (const char* file = std::getenv("LOOM_TOPO_FILE"); file != nullptr && *file != '\0') {
    d.topology = load_topology(file);
    d.source = std::string("LOOM_TOPO_FILE=") + file;
    if (world != nullptr) {
      require(d.topology.world_size() == world->size(), "LOOM_TOPO_FILE ", file, " places ", d.topology.world_size(),
              " ranks but the job has ", world->size());
    }
    return d;
  }
  const Host local = detect_host(d.notes);
  d.source = local.gpus.empty() ? "host names (no GPUs)" : "NVML and sysfs";
  if (world == nullptr) {
    d.topology.hosts.push_back(local);
    return d;
  }
  std::map<std::string, int> host_of;
  for (const auto& [name, gpu] : gather_places(*world)) {
    auto [it, added] = host_of.try_emplace(name, static_cast<int>(d.topology.hosts.size()));
    if (added) {
      Host host = local;  // a homogeneous cluster: every host built like this one
      host.name = name;
      d.topology.hosts.push_back(host);
    }
    d.topology.ranks.push_back({it->second, gpu < static_cast<int>(local.gpus.size()) ? gpu : -1});
  }
  if (d.topology.hosts.size() > 1) d.notes += "Other hosts assumed built like this one. ";
  d.topology.validate();
  return d;
}

}  // namespace loom::topo
