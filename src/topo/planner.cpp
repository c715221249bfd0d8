#include "loom/topo/planner.hpp"

#include <map>

namespace loom::topo {

namespace {

// How good a hop from GPU a to GPU b is: NVLink links first, then staying on one socket.
std::pair<int, int> hop_rank(const Host& host, int a, int b) {
  const int links = nvlinks_between(host, a, b);
  const bool same_socket = a >= 0 && b >= 0 &&
                           host.gpus[static_cast<std::size_t>(a)].socket == host.gpus[static_cast<std::size_t>(b)].socket;
  return {links, same_socket ? 1 : 0};
}

std::vector<std::vector<int>> orders_for(const Topology& topology) {
  std::map<int, std::vector<int>> gpus_of_host;
  for (const RankPlace& p : topology.placement()) gpus_of_host[p.host].push_back(p.gpu);
  std::vector<std::vector<int>> orders(topology.hosts.size());
  for (const auto& [h, gpus] : gpus_of_host) orders[static_cast<std::size_t>(h)] = ring_order(topology.hosts[static_cast<std::size_t>(h)], gpus);
  return orders;
}

}  // namespace

std::vector<int> ring_order(const Host& host, const std::vector<int>& gpus) {
  std::vector<int> order;
  if (gpus.empty()) return order;
  std::vector<bool> placed(gpus.size(), false);
  int current = 0;
  placed[0] = true;
  order.push_back(0);
  while (order.size() < gpus.size()) {
    int best = -1;
    std::pair<int, int> best_rank{-1, -1};
    for (std::size_t i = 0; i < gpus.size(); ++i) {
      if (placed[i]) continue;
      const auto rank = hop_rank(host, gpus[static_cast<std::size_t>(current)], gpus[i]);
      if (rank > best_rank) {
        best_rank = rank;
        best = static_cast<int>(i);
      }
    }
    placed[static_cast<std::size_t>(best)] = true;
    order.push_back(best);
    current = best;
  }
  return order;
}

Planner::Planner(const Topology& topology, CostModelOptions options)
    : ring_orders_(orders_for(topology)), model_(topology, options, ring_orders_) {}

std::vector<Plan> Planner::candidates(Collective collective, std::int64_t bytes) const {
  std::vector<Plan> out;
  for (Algorithm a : {Algorithm::ring, Algorithm::tree, Algorithm::hierarchical}) {
    if (model_.available(a)) out.push_back({a, model_.predict(collective, a, bytes)});
  }
  return out;
}

Plan Planner::choose(Collective collective, std::int64_t bytes) const {
  const std::vector<Plan> all = candidates(collective, bytes);
  Plan best = all.front();
  for (const Plan& p : all) {
    if (p.prediction.seconds < best.prediction.seconds) best = p;
  }
  return best;
}

std::int64_t Planner::recommended_bucket_bytes() const {
  const std::int64_t mib = std::int64_t{1} << 20;
  const double asymptote = choose(Collective::all_reduce, 1024 * mib).prediction.busbw_gbps;
  std::int64_t bytes = mib;
  while (bytes < 256 * mib && choose(Collective::all_reduce, bytes).prediction.busbw_gbps < 0.8 * asymptote) bytes *= 2;
  return bytes;
}

}  // namespace loom::topo
