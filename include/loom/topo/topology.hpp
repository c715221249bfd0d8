// The machine a job runs on, as plain data: hosts; their GPUs with architecture, memory and NVLink
// (links and per-link bandwidth); NVSwitch; which CPU socket each GPU and NIC hangs off; the PCIe
// and socket-to-socket bandwidth; the network interfaces; and where each rank runs. Loaded from and
// dumped to JSON (topo/topology_json.hpp), detected on real machines (topo/detect.hpp), and the
// input of the cost model and planner (topo/cost_model.hpp, topo/planner.hpp). Bandwidths are GB/s
// per direction (NICs: Gb/s, as they are sold).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom::topo {

struct Gpu {
  std::string name;               // "NVIDIA A100-SXM4-80GB"
  std::string arch;               // "sm_80"
  std::int64_t memory_bytes = 0;
  int nvlinks = 0;                // NVLink links of this GPU (0: none)
  double nvlink_gbps = 0;         // GB/s per link per direction (NVLink3 and NVLink4: 25)
  int socket = 0;                 // the CPU socket (NUMA node) its PCIe root hangs off
  std::string pci_bus_id{};       // "0000:07:00.0" when detected: how ranks find their GPU
};

// A direct NVLink connection between two GPUs of a host that has no NVSwitch (bridged pairs).
struct NvLinkPair {
  int a = 0, b = 0;
  int links = 0;
};

struct Nic {
  std::string name;   // "mlx5_0"
  double gbits = 0;   // line rate in Gb/s per direction
  int socket = 0;
};

struct Host {
  std::string name;
  std::vector<Gpu> gpus;
  bool nvswitch = false;             // every GPU reaches every other at its full NVLink bandwidth
  std::vector<NvLinkPair> nvlink_pairs{};
  double pcie_gbps = 0;              // GPU <-> host bridge, GB/s per direction (PCIe 4 x16: ~25)
  double socket_link_gbps = 0;       // between CPU sockets (UPI / xGMI), GB/s per direction
  std::vector<Nic> nics{};
};

// Where a rank runs: a host, and a GPU of it (-1: the CPU).
struct RankPlace {
  int host = 0;
  int gpu = -1;
};

struct Topology {
  std::vector<Host> hosts;
  // Rank r runs at ranks[r]. Empty: one rank per GPU, host after host (hosts without GPUs: one
  // rank each).
  std::vector<RankPlace> ranks{};

  // The explicit placement (ranks, or the default one) of every rank.
  std::vector<RankPlace> placement() const;
  int world_size() const { return static_cast<int>(placement().size()); }
  // Throws an invalid_argument Error naming the first inconsistency (a pair naming a GPU that does
  // not exist, a rank on a missing host or GPU, a negative bandwidth, ...).
  void validate() const;
};

// NVLink links between GPUs a and b of host (through NVSwitch: min of both GPUs' links).
int nvlinks_between(const Host& host, int a, int b);

}  // namespace loom::topo
