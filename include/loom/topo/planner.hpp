// Decisions from the cost model: which algorithm per message size, the gradient bucket size for
// the GradientReducer, and the order of each host's GPUs in rings (NVLink-bridged pairs next to
// each other on PCIe servers, so the ring's PCIe hops are as few as the bridges allow).
#pragma once

#include <cstdint>
#include <vector>

#include "loom/topo/cost_model.hpp"

namespace loom::topo {

// The order of `gpus` (GPU indices of `host`, one per local rank) in a ring, as positions into
// `gpus`: greedily the fastest hop next (NVLink before PCIe, same socket before across), ties to
// the lower position, starting at position 0.
std::vector<int> ring_order(const Host& host, const std::vector<int>& gpus);

struct Plan {
  Algorithm algorithm = Algorithm::ring;
  Prediction prediction{};
};

class Planner {
 public:
  explicit Planner(const Topology& topology, CostModelOptions options = {});

  // The fastest available algorithm for one collective of `bytes`.
  Plan choose(Collective collective, std::int64_t bytes) const;
  // Every available algorithm's prediction, in the order ring, tree, hierarchical.
  std::vector<Plan> candidates(Collective collective, std::int64_t bytes) const;
  // The smallest power of two from 1 MiB to 256 MiB whose all-reduce (fastest algorithm) reaches
  // 80% of the bus bandwidth of a 1 GiB one: large enough that per-call latency costs at most a
  // fifth, small enough to start communicating early in backward.
  std::int64_t recommended_bucket_bytes() const;
  const std::vector<std::vector<int>>& ring_orders() const noexcept { return ring_orders_; }
  const CostModel& model() const noexcept { return model_; }

 private:
  std::vector<std::vector<int>> ring_orders_;
  CostModel model_;
};

}  // namespace loom::topo
