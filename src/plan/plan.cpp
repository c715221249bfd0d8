#include "loom/plan/plan.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "loom/core/error.hpp"
#include "loom/model/parameter_space.hpp"
#include "loom/model/precision.hpp"
#include "loom/topo/planner.hpp"

namespace loom::plan {

namespace {

struct Peak {
  const char* arch;
  const char* name_contains;  // "" matches any name of the architecture
  double fp32, tf32, half;    // dense TFLOP/s (fp16 and bf16 alike)
};

// NVIDIA's data-sheet dense peaks for the SXM parts (H200 has H100's compute).
constexpr Peak peaks[] = {
    {"sm_90", "", 67, 494, 989},
    {"sm_80", "", 19.5, 156, 312},
    {"sm_70", "", 15.7, 15.7, 125},
};

// The fastest algorithm's time for one collective over `model`'s ranks (nothing on one rank).
double seconds(const topo::Planner* planner, topo::Collective collective, std::int64_t bytes) {
  if (planner == nullptr || bytes <= 0) return 0;
  return planner->choose(collective, bytes).prediction.seconds;
}

// A topology of one host's first `ranks` GPUs: where a tensor group runs.
topo::Topology tensor_group(const topo::Topology& topology, int ranks) {
  topo::Topology group;
  group.hosts = {topology.hosts.front()};
  for (int g = 0; g < ranks; ++g) group.ranks.push_back({0, g});
  return group;
}

}  // namespace

topo::Topology hgx_cluster(const std::string& kind, int gpus) {
  require(gpus >= 1, "hgx_cluster: ", gpus, " GPUs");
  topo::Gpu gpu;
  double nic_gbits = 400;
  if (kind == "A100") {
    gpu = {.name = "NVIDIA A100-SXM4-80GB", .arch = "sm_80", .memory_bytes = 80LL << 30, .nvlinks = 12, .nvlink_gbps = 25};
    nic_gbits = 200;
  } else if (kind == "H100") {
    gpu = {.name = "NVIDIA H100 80GB HBM3", .arch = "sm_90", .memory_bytes = 80LL << 30, .nvlinks = 18, .nvlink_gbps = 25};
  } else if (kind == "H200") {
    gpu = {.name = "NVIDIA H200", .arch = "sm_90", .memory_bytes = 141LL << 30, .nvlinks = 18, .nvlink_gbps = 25};
  } else {
    fail(ErrorCategory::invalid_argument, "hgx_cluster: unknown GPU kind '", kind, "' (A100, H100 or H200)");
  }
  topo::Topology topology;
  for (int first = 0; first < gpus; first += 8) {
    topo::Host host;
    host.name = "hgx" + std::to_string(first / 8);
    host.nvswitch = true;
    host.pcie_gbps = kind == "A100" ? 25 : 50;
    host.socket_link_gbps = 60;
    for (int g = first; g < std::min(gpus, first + 8); ++g) {
      topo::Gpu placed = gpu;
      placed.socket = (g - first) / 4;
      host.gpus.push_back(placed);
      host.nics.push_back({.name = "nic" + std::to_string(g - first), .gbits = nic_gbits, .socket = placed.socket});
    }
    topology.hosts.push_back(std::move(host));
  }
  return topology;
}

std::string fixed(double value, int digits) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", digits, value);
  return text;
}

std::optional<double> peak_tflops(const topo::Gpu& gpu, const std::string& precision) {
  for (const Peak& p : peaks) {
    if (gpu.arch != p.arch || gpu.name.find(p.name_contains) == std::string::npos) continue;
    if (precision == "fp32") return p.fp32;
    if (precision == "tf32") return p.tf32;
    if (precision == "fp16" || precision == "bf16") return p.half;
    return std::nullopt;
  }
  return std::nullopt;
}

std::vector<std::int64_t> gpt_unit_elements(const nn::GPTConfig& m, int tensor, int ranks) {
  m.validate();
  const std::int64_t t = tensor, c = m.channels;
  require(t >= 1 && m.heads % t == 0 && m.padded_vocab() % t == 0, "plan: ", t, " tensor-parallel ranks must divide ",
          m.heads, " heads and ", m.padded_vocab(), " vocabulary rows");
  // The parameters in the order GPT registers them (the padding does not depend on the order).
  std::vector<std::int64_t> out{model::padded_unit_elements(
      std::vector<std::int64_t>{m.padded_vocab() / t * c, m.context * c, c, c}, ranks)};
  const std::vector<std::int64_t> block{c,         c,                      // ln1
                                        3 * c * c / t, 3 * c / t,          // attention's qkv (column)
                                        c * c / t, c,                      // its projection (row, whole bias)
                                        c,         c,                      // ln2
                                        4 * c * c / t, 4 * c / t,          // fc (column)
                                        4 * c * c / t, c};                 // fc_proj (row)
  const std::int64_t padded_block = model::padded_unit_elements(block, ranks);
  out.insert(out.end(), static_cast<std::size_t>(m.layers), padded_block);
  return out;
}

std::string LayoutPlan::name() const {
  std::string out = tensor > 1 ? "TP " + std::to_string(tensor) + " x DP " + std::to_string(data)
                               : "DP " + std::to_string(data);
  out += stage == 0 ? ", DDP" : ", ZeRO-" + std::to_string(stage);
  out += ", ";
  out += nn::to_string(checkpointing);
  return out;
}

PlanResult plan(const PlanRequest& request) {
  PlanResult result;
  result.request = request;
  const nn::GPTConfig& m = request.model;
  m.validate();
  const model::Precision precision = model::Precision::parse(request.precision);
  require(request.micro_batch >= 1 && request.grad_accum >= 1, "plan: the micro-batch and gradient accumulation must "
          "be positive, got ", request.micro_batch, " and ", request.grad_accum);
  require(request.efficiency > 0 && request.efficiency <= 1, "plan: the efficiency must be in (0, 1], got ",
          request.efficiency);
  require(request.headroom >= 0 && request.headroom < 1, "plan: the headroom must be in [0, 1), got ", request.headroom);
  request.topology.validate();
  const std::vector<topo::RankPlace> places = request.topology.placement();
  require(!places.empty() && std::all_of(places.begin(), places.end(), [](const topo::RankPlace& p) { return p.gpu >= 0; }),
          "plan: every rank of the topology must run on a GPU (give a cluster file such as "
          "tests/fixtures/topo/cluster-16x-hgx-h100.json)");
  const topo::Gpu& gpu = request.topology.hosts[static_cast<std::size_t>(places.front().host)]
                             .gpus[static_cast<std::size_t>(places.front().gpu)];
  result.gpu = gpu.name;
  result.ranks = static_cast<int>(places.size());
  for (const topo::RankPlace& p : places) result.ranks_per_host += p.host == places.front().host ? 1 : 0;
  if (request.peak_tflops > 0) {
    result.peak_tflops = request.peak_tflops;
  } else {
    const std::optional<double> peak = peak_tflops(gpu, request.precision);
    require(peak.has_value(), "plan: no peak for ", gpu.name, " (", gpu.arch, ") in ", request.precision,
            ": give the GPU's dense TFLOP/s (--peak-tflops)");
    result.peak_tflops = *peak;
  }
  const std::int64_t capacity = request.memory_bytes > 0 ? request.memory_bytes : gpu.memory_bytes;
  require(capacity > 0, "plan: the GPU's memory is unknown: give it (--memory-gib)");

  const std::int64_t steps = m.context, s = static_cast<std::int64_t>(dtype_size(precision.storage));
  const std::int64_t tokens = request.micro_batch * steps * request.grad_accum;  // per data rank per step
  const topo::Planner world(request.topology);
  const std::int64_t bucket = world.recommended_bucket_bytes();
  for (const int t : request.tensor_sizes) {
    std::string impossible;
    if (t < 1 || result.ranks % t != 0) impossible = std::to_string(t) + " does not divide the " + std::to_string(result.ranks) + " ranks";
    else if (t > result.ranks_per_host) impossible = "a tensor group must sit in one host of " + std::to_string(result.ranks_per_host) + " GPUs";
    else if (m.heads % t != 0) impossible = std::to_string(m.heads) + " heads do not split " + std::to_string(t) + " ways";
    else if (m.padded_vocab() % t != 0) impossible = "the padded vocabulary does not split " + std::to_string(t) + " ways";
    const int data = t >= 1 && result.ranks % t == 0 ? result.ranks / t : 0;
    const std::optional<topo::Planner> tensor_planner =
        impossible.empty() && t > 1 ? std::optional<topo::Planner>(std::in_place, tensor_group(request.topology, t))
                                    : std::nullopt;
    for (const int stage : request.stages) {
      for (const nn::ActivationCheckpointing mode : request.checkpointing) {
        LayoutPlan layout;
        layout.tensor = t;
        layout.data = data;
        layout.stage = stage;
        layout.checkpointing = mode;
        layout.capacity = capacity;
        if (!impossible.empty()) {
          layout.possible = false;
          layout.reason = "cannot run: " + impossible;
          result.layouts.push_back(layout);
          continue;
        }
        const std::vector<std::int64_t> units = gpt_unit_elements(m, t, data);
        const std::vector<std::size_t> roots{0};
        layout.model_state = shard::model_state_bytes(units, precision.storage, request.optimizer, stage, data, roots);
        nn::GPTConfig checkpointed = m;
        checkpointed.checkpointing = mode;
        layout.activations = predict_activations(
            {.model = checkpointed, .batch = request.micro_batch, .steps = steps, .storage_bytes = s, .tensor = t,
             .cpu = false});
        layout.reserved = request.reserved_bytes;

        // Data-parallel communication per rank per step.
        const topo::Planner* dp = data > 1 ? &world : nullptr;
        std::int64_t padded = 0;
        for (const std::int64_t u : units) padded += u;
        double reduce = 0, after_optimizer = 0, gathers = 0;
        if (stage == 0) {
          for (std::int64_t left = padded * 4; left > 0; left -= bucket) {
            reduce += seconds(dp, topo::Collective::all_reduce, std::min(left, bucket));
          }
          layout.data_bytes = data > 1 ? padded * 4 : 0;
        } else {
          const std::int64_t reductions = stage == 1 ? 1 : request.grad_accum;  // ZeRO-2/3 reduce every micro-batch
          std::int64_t gathered = 0;  // elements gathered per rank per step
          for (std::size_t i = 0; i < units.size(); ++i) {
            const std::int64_t u = units[i];
            reduce += static_cast<double>(reductions) * seconds(dp, topo::Collective::reduce_scatter, u * 4);
            // ZeRO-3 gathers a unit for its forward and again for its backward, each micro-batch,
            // except the root unit (0: gathered for both) and the last block (kept from its forward
            // for backward, which starts with it); ZeRO-1/2 gather every unit once, after the update.
            const std::int64_t times = stage < 3 ? 1 : (i == 0 || i + 1 == units.size() ? 1 : 2) * request.grad_accum;
            (stage == 3 ? gathers : after_optimizer) +=
                static_cast<double>(times) * seconds(dp, topo::Collective::all_gather, u * s);
            gathered += times * u;
          }
          layout.data_bytes = data > 1 ? padded * 4 * reductions + gathered * s : 0;
        }
        layout.data_seconds = reduce + after_optimizer + gathers;

        // Compute: the training FLOPs and what checkpointing recomputes, split over the tensor group.
        const double flops = m.training_flops_per_token(steps) + checkpointed.recompute_flops_per_token(steps);
        const double flop_seconds = static_cast<double>(tokens) / t / (result.peak_tflops * 1e12 * request.efficiency);
        layout.compute_seconds = flops * flop_seconds;
        layout.recompute_seconds = (flops - m.training_flops_per_token(steps)) * flop_seconds;

        // Tensor-parallel all-reduces of [B, T, C] per micro-batch: 2 per block and the embedding
        // forward, the same backward, and the recomputed blocks' forward again under full.
        const std::int64_t activation = request.micro_batch * steps * m.channels * s;
        std::int64_t calls = 2 * (2 * m.layers + 1);
        if (mode == nn::ActivationCheckpointing::full) {
          for (std::int64_t l = 0; l < m.layers; ++l) calls += checkpointed.checkpointed(l) ? 2 : 0;
        }
        if (tensor_planner) {
          layout.tensor_seconds = static_cast<double>(calls * request.grad_accum) *
                                  seconds(&*tensor_planner, topo::Collective::all_reduce, activation);
          layout.tensor_bytes = calls * request.grad_accum * activation;
        }
        // What the computation hides: backward (2/3 of a micro-batch's compute) hides the last
        // micro-batch's reduction (earlier ones' too at ZeRO-2); ZeRO-3's gathers are prefetched
        // through forward and backward.
        const double micro_compute = layout.compute_seconds / static_cast<double>(request.grad_accum);
        if (stage == 3) {
          layout.data_exposed_seconds = std::max(0.0, reduce + gathers - layout.compute_seconds);
        } else {
          const double hidden_by = stage == 2 ? layout.compute_seconds * 2 / 3 : micro_compute * 2 / 3;
          layout.data_exposed_seconds = std::max(0.0, reduce - hidden_by) + after_optimizer;
        }
        layout.step_seconds = layout.compute_seconds + layout.tensor_seconds + layout.data_exposed_seconds;
        layout.tokens_per_second = static_cast<double>(tokens * data) / layout.step_seconds;
        result.layouts.push_back(layout);
      }
    }
  }

  // The fastest layout that fits (the most tokens per second over the whole job: the layouts
  // differ in how many replicas share the work, so their steps are not comparable); the others say
  // why not.
  const double headroom = request.headroom;
  for (std::size_t i = 0; i < result.layouts.size(); ++i) {
    const LayoutPlan& l = result.layouts[i];
    if (!l.possible || l.total() > l.usable(headroom)) continue;
    if (!result.recommended || l.tokens_per_second > result.layouts[*result.recommended].tokens_per_second) {
      result.recommended = i;
    }
  }
  for (std::size_t i = 0; i < result.layouts.size(); ++i) {
    LayoutPlan& l = result.layouts[i];
    if (!l.possible || (result.recommended && i == *result.recommended)) continue;
    if (l.total() > l.usable(headroom)) {
      l.reason = "does not fit: needs " + fixed(gib(l.total()), 1) + " GiB of " + fixed(gib(l.usable(headroom)), 1) +
                 " GiB usable (" + fixed(headroom * 100, 0) + "% headroom)";
      continue;
    }
    const LayoutPlan& best = result.layouts[*result.recommended];
    l.reason = "fits, but " + fixed((1 - l.tokens_per_second / best.tokens_per_second) * 100, 1) + "% fewer tokens/s";
    // The largest of what it spends besides useful compute.
    const double costs[] = {l.tensor_seconds, l.data_exposed_seconds, l.recompute_seconds};
    const char* names[] = {"tensor-parallel all-reduces", "exposed data-parallel communication", "recomputation"};
    const std::size_t worst = static_cast<std::size_t>(std::max_element(std::begin(costs), std::end(costs)) - costs);
    if (costs[worst] > 0) {
      l.reason += std::string(" (") + names[worst] + " " + fixed(costs[worst] / l.step_seconds * 100, 0) + "% of its step)";
    }
  }
  return result;
}

}  // namespace loom::plan
