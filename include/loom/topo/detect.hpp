// The topology of the running job. LOOM_TOPO_FILE, when set, names a topology file that is used
// instead of detection (simulation, tests, machines detection gets wrong). Otherwise this host is
// detected: GPUs, NVLink (to peers or to NVSwitches) and PCIe generation and width through NVML
// loaded at run time, CPU sockets and NICs through sysfs; without NVML, the CUDA runtime's GPUs
// without links; without GPUs, none. Given a communicator, the ranks' host names are gathered so
// that ranks sharing a host are known; other hosts are assumed built like this one (a homogeneous
// cluster). On a CPU machine the result is "nodes only": hosts and their ranks.
#pragma once

#include <string>

#include "loom/comm/communicator.hpp"
#include "loom/topo/topology.hpp"

namespace loom::topo {

struct Detection {
  Topology topology;
  std::string source;  // "LOOM_TOPO_FILE=...", or what detection used ("NVML", "CUDA runtime", ...)
  std::string notes;   // what could not be detected, and why
};

Host detect_host(std::string& notes);

// world: the job's communicator (nullptr: this process alone). A collective when given.
Detection detect_topology(comm::Communicator* world = nullptr);

}  // namespace loom::topo
