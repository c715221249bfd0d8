// Human-readable views of a topology and its plan, as loom-topo and allreduce_bench --simulate
// print them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/topo/planner.hpp"

namespace loom::topo {

// The link matrix of one host in nvidia-smi topo -m's vocabulary: X (self), NV# (# NVLinks), NODE
// (PCIe within a socket), SYS (PCIe across sockets), with each GPU's socket and the NICs.
std::string link_matrix(const Host& host);

// A summary of the job (ranks, hosts, bottleneck bandwidths, ring orders, bucket recommendation)
// and, per message size, each algorithm's predicted time and bus bandwidth with the planner's choice.
std::string plan_report(const Planner& planner, Collective collective, const std::vector<std::int64_t>& sizes);

// min, min*factor, ... up to max (inclusive when reached).
std::vector<std::int64_t> message_sizes(std::int64_t min_bytes, std::int64_t max_bytes, std::int64_t factor);

}  // namespace loom::topo
