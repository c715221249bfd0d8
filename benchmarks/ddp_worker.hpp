// One ddp_bench measurement, run by every rank of a job (under mpirun, or alone): the training step
// of a GPT model with and without data-parallel communication, and the communication alone, for
// bucketed reduction and, optionally, one all-reduce per parameter.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

#include "loom/comm/world.hpp"
#include "loom/nn/gpt.hpp"

namespace loom::bench {

struct DdpWorkload {
  std::string name;            // "train_bench default", "200 small parameters"
  nn::GPTConfig model{};
  std::int64_t batch = 8;      // sequences per rank per step
  std::string precision = "fp32";
  double bucket_mb = 25;
  bool compare_per_tensor = false;
  int steps = 20;              // timed (medians reported)
  int warmup = 3;
};

// The named workloads: "default" (train_bench's default GPT), "small-params" (a deep, narrow GPT
// with 196 parameter tensors of at most a few KiB each, where per-tensor all-reduce pays its
// latency 196 times) and "gpt2-124m" (GPT-2 small, for GPUs).
DdpWorkload named_workload(const std::string& name);

// Every rank calls it; rank 0's row is returned (the others return an empty object). Row fields:
// ranks, step_ms (median, with the reducer), compute_ms (median of the same step without any
// communication, alternating with the data-parallel steps), exposed_comm_ms = step - compute,
// synchronize_wait_ms (median time blocked in synchronize()), comm_only_ms (the same reductions
// with nothing to overlap), tokens_per_s (the job's), buckets, parameters and, when compared,
// per_tensor_{step,comm_only}_ms. The launcher adds hidden_fraction (below).
nlohmann::json measure_ddp(const DdpWorkload& workload, World& world);

// The share of the communication hidden behind the backward pass, 1 - exposed / comm_only, within
// [0, 1]; none, with the reason in `why`, where it means nothing: one rank (nothing to hide), ranks
// x threads past the cores (each rank's computation then slows with its neighbours' and with the
// communication's), or a step that lost more than the communication alone takes.
std::optional<double> hidden_fraction(double exposed_ms, double comm_only_ms, int ranks, bool oversubscribed,
                                      std::string& why);

}  // namespace loom::bench
