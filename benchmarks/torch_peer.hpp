// The PyTorch peer of loom's GPT training step (benchmarks/peers/torch_gpt.py), run as a child
// process when a Python with PyTorch is found (Debian: apt-get install python3-torch), so that
// train_bench and ddp_bench can compare against it in the same run.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>

#include "loom/nn/gpt.hpp"

namespace loom::bench {

struct TorchPeerRequest {
  nn::GPTConfig model{};
  std::int64_t batch = 8;  // sequences per rank per step
  int steps = 20, warmup = 3;
  int ranks = 1;           // > 1: DistributedDataParallel over gloo, one process per rank
  int threads = 1;         // intra-op threads per rank
};

// The Python interpreter that imports torch (/usr/bin/python3, then python3 on PATH), or nullopt.
std::optional<std::string> torch_python();

// Runs the peer; its JSON record ({"torch", "step_ms", "tokens_per_s", ...}), or nullopt with
// why_not set when PyTorch or the script is missing or the run fails.
std::optional<nlohmann::json> run_torch_peer(const TorchPeerRequest& request, std::string& why_not);

}  // namespace loom::bench
