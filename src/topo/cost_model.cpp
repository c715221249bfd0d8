#include "loom/topo/cost_model.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "loom/core/error.hpp"

namespace loom::topo {

std::string to_string(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::ring: return "ring";
    case Algorithm::tree: return "tree";
    case Algorithm::hierarchical: return "hier";
  }
  return "?";
}

std::string to_string(Collective collective) {
  switch (collective) {
    case Collective::all_reduce: return "all_reduce";
    case Collective::reduce_scatter: return "reduce_scatter";
    case Collective::all_gather: return "all_gather";
  }
  return "?";
}

namespace {

struct Hop {
  double gbps = 0, latency_us = 0;
};

// One step of an intra-host ring from GPU a to GPU b (or between CPU ranks).
Hop hop(const Host& host, int a, int b, const CostModelOptions& o) {
  if (a < 0 || b < 0) {  // CPU ranks: shared memory, bounded by the socket link when there is one
    const double gbps = host.socket_link_gbps > 0 ? host.socket_link_gbps : 10.0;
    return {gbps * o.pcie_efficiency, o.pcie_latency_us};
  }
  if (const int links = nvlinks_between(host, a, b); links > 0) {
    const double per_link = host.gpus[static_cast<std::size_t>(a)].nvlink_gbps;
    return {links * per_link * o.nvlink_efficiency, o.nvlink_latency_us};
  }
  double gbps = host.pcie_gbps;
  const int sa = host.gpus[static_cast<std::size_t>(a)].socket, sb = host.gpus[static_cast<std::size_t>(b)].socket;
  if (sa != sb && host.socket_link_gbps > 0) gbps = std::min(gbps, host.socket_link_gbps);
  return {gbps * o.pcie_efficiency, o.pcie_latency_us};
}

}  // namespace

CostModel::CostModel(Topology topology, CostModelOptions options, std::vector<std::vector<int>> ring_orders)
    : topology_(std::move(topology)), options_(options) {
  topology_.validate();
  const std::vector<RankPlace> places = topology_.placement();
  ranks_ = static_cast<int>(places.size());
  std::map<int, std::vector<int>> gpus_of_host;  // host -> its ranks' GPUs, in rank order
  for (const RankPlace& p : places) gpus_of_host[p.host].push_back(p.gpu);
  hosts_ = static_cast<int>(gpus_of_host.size());
  intra_gbps_ = std::numeric_limits<double>::infinity();
  network_gbps_ = std::numeric_limits<double>::infinity();
  uniform_ = true;
  for (const auto& [h, gpus] : gpus_of_host) {
    const Host& host = topology_.hosts[static_cast<std::size_t>(h)];
    uniform_ = uniform_ && (per_host_ == 0 || per_host_ == static_cast<int>(gpus.size()));
    per_host_ = std::max(per_host_, static_cast<int>(gpus.size()));
    std::vector<int> order(gpus.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
    if (static_cast<std::size_t>(h) < ring_orders.size() && ring_orders[static_cast<std::size_t>(h)].size() == gpus.size()) {
      order = ring_orders[static_cast<std::size_t>(h)];
    }
    for (std::size_t i = 0; gpus.size() > 1 && i < order.size(); ++i) {
      const int a = gpus[static_cast<std::size_t>(order[i])];
      const int b = gpus[static_cast<std::size_t>(order[(i + 1) % order.size()])];
      const Hop step = hop(host, a, b, options_);
      require(step.gbps > 0, "cost model: host '", host.name, "' has no bandwidth between GPUs ", a, " and ", b,
              " (no NVLink and a PCIe bandwidth of ", host.pcie_gbps, " GB/s)");
      intra_gbps_ = std::min(intra_gbps_, step.gbps);
      intra_latency_us_ = std::max(intra_latency_us_, step.latency_us);
    }
    double nic_gbits = 0;
    for (const Nic& nic : host.nics) nic_gbits += nic.gbits;
    if (nic_gbits == 0) nic_gbits = options_.default_nic_gbits;
    network_gbps_ = std::min(network_gbps_, nic_gbits / 8.0 * options_.network_efficiency);
  }
}

bool CostModel::available(Algorithm algorithm) const {
  return algorithm != Algorithm::hierarchical || (hosts_ > 1 && per_host_ > 1 && uniform_);
}

Prediction CostModel::predict(Collective collective, Algorithm algorithm, std::int64_t bytes) const {
  require(available(algorithm), "cost model: the ", to_string(algorithm), " algorithm needs several hosts with the same "
          "number (> 1) of ranks each; this topology has ", hosts_, " host(s) of up to ", per_host_, " rank(s)",
          uniform_ ? "" : ", unevenly");
  require(bytes >= 0, "cost model: a negative message size ", bytes);
  const double n = ranks_, d = static_cast<double>(bytes) / 1e9;  // GB
  const bool many_hosts = hosts_ > 1;
  const double intra = intra_gbps_, net = network_gbps_;
  const double bottleneck = many_hosts ? std::min(intra, net) : intra;
  const double step_us = many_hosts ? options_.network_latency_us : intra_latency_us_;
  const bool all_reduce = collective == Collective::all_reduce;
  const double passes = all_reduce ? 2.0 : 1.0;  // reduce-scatter + all-gather
  double seconds = 0;
  if (ranks_ > 1) {
    switch (algorithm) {
      case Algorithm::ring:
        seconds = passes * (n - 1) / n * d / bottleneck + passes * (n - 1) * step_us * 1e-6;
        break;
      case Algorithm::tree: {
        // A chain inside each host, a binary tree between hosts; pipelined, so the bandwidth term
        // is the whole message per pass, without the ring's (n-1)/n.
        const double depth = (per_host_ - 1) * intra_latency_us_ +
                             std::ceil(std::log2(std::max(hosts_, 1))) * options_.network_latency_us;
        seconds = passes * d / (bottleneck * options_.tree_efficiency) + passes * depth * 1e-6;
        break;
      }
      case Algorithm::hierarchical: {
        const double k = per_host_, hosts = hosts_;
        // Inside: (k-1)/k of the message per pass at the intra-host ring bandwidth. Between hosts:
        // k concurrent rings (one per local rank) over 1/k of the message share the NICs.
        const double inside = passes * (k - 1) / k * d / intra + passes * (k - 1) * intra_latency_us_ * 1e-6;
        const double between = passes * (hosts - 1) / hosts * d / net + passes * (hosts - 1) * options_.network_latency_us * 1e-6;
        seconds = inside + between + 2 * options_.launch_us * 1e-6;  // three calls instead of one
        break;
      }
    }
  }
  seconds += options_.launch_us * 1e-6;
  Prediction p;
  p.seconds = seconds;
  p.algbw_gbps = d / seconds;
  p.busbw_gbps = p.algbw_gbps * (all_reduce ? 2 * (n - 1) / n : (n - 1) / n);
  return p;
}

}  // namespace loom::topo
