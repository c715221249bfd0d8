// An alpha-beta cost model of collectives on a Topology: every algorithm's time is a latency per
// step (alpha, by link type) times its steps plus bytes moved over the bottleneck bandwidth (beta),
// for the flat ring, the tree, and loom's hierarchical schedule (intra-host reduce-scatter, one
// inter-host all-reduce per local rank over the hosts' NICs, intra-host all-gather), whose stages
// run one after another, as loom runs them (no pipelining across chunks). It pays where the
// network is much slower than the links inside a host (cloud nodes with few NICs): between hosts it
// moves 2(h-1)/h of the message instead of a flat ring's 2(n-1)/n, and it takes 2(h-1) network
// latencies instead of 2(n-1).
//
// Link bandwidths are the topology's line rates times a protocol efficiency. NVLink's 0.8 is what
// NCCL's maintainers state for its Simple protocol ("with the protocol overhead (~20%) NCCL can get
// an effective NVLink bandwidth of 370GB/s" of H100's 450 GB/s line rate, NVIDIA/nccl-tests#212);
// the network's 0.9 is typical of InfiniBand/RoCE at large messages.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/topo/topology.hpp"

namespace loom::topo {

enum class Algorithm { ring, tree, hierarchical };
enum class Collective { all_reduce, reduce_scatter, all_gather };
std::string to_string(Algorithm algorithm);
std::string to_string(Collective collective);

struct CostModelOptions {
  double nvlink_efficiency = 0.8;
  double pcie_efficiency = 0.8;
  double network_efficiency = 0.9;
  double nvlink_latency_us = 1.0;   // per step of a ring or tree
  double pcie_latency_us = 2.0;
  double network_latency_us = 5.0;
  double launch_us = 5.0;           // fixed cost of each collective call
  // A pipelined tree (reduce up, broadcast down) keeps fewer links busy than a ring: loom assumes
  // it reaches 3/4 of the bottleneck bandwidth (an assumption, not a measurement).
  double tree_efficiency = 0.75;
  double default_nic_gbits = 10;    // a host of a multi-host topology that lists no NIC
};

struct Prediction {
  double seconds = 0;
  double algbw_gbps = 0;  // bytes / time, GB/s
  double busbw_gbps = 0;  // nccl-tests' bus bandwidth: algbw x 2(n-1)/n (all-reduce) or (n-1)/n
};

class CostModel {
 public:
  // ring_orders: per host, the order of its local ranks in rings (planner::ring_order); empty:
  // local rank order.
  explicit CostModel(Topology topology, CostModelOptions options = {},
                     std::vector<std::vector<int>> ring_orders = {});

  // hierarchical needs more than one host and the same number (> 1) of ranks on every host.
  bool available(Algorithm algorithm) const;
  // Throws invalid_argument for an unavailable algorithm.
  Prediction predict(Collective collective, Algorithm algorithm, std::int64_t bytes) const;

  int ranks() const noexcept { return ranks_; }
  int hosts() const noexcept { return hosts_; }
  int ranks_per_host() const noexcept { return per_host_; }
  double intra_host_gbps() const noexcept { return intra_gbps_; }  // slowest host's ring, effective
  double network_gbps() const noexcept { return network_gbps_; }    // slowest host's NICs, effective
  const Topology& topology() const noexcept { return topology_; }

 private:
  Topology topology_;
  CostModelOptions options_;
  int ranks_ = 0, hosts_ = 0, per_host_ = 0;
  bool uniform_ = true;
  double intra_gbps_ = 0, network_gbps_ = 0, intra_latency_us_ = 0;
};

}  // namespace loom::topo
