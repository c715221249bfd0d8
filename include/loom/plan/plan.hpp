// loom-plan: will a GPT fit, in which layout, and how fast? For every layout of a topology's GPUs
// (data parallel by DDP or ZeRO-1/2/3, tensor parallel 1/2/4/8 inside a host, with and without
// activation checkpointing) it predicts, per rank and without building the model:
//   memory    by category: parameters, gradients and optimizer state to the byte
//             (shard::model_state_bytes on the units' padded sizes, which model::ParameterSpace's
//             layout rule gives), ZeRO's unit buffers, activations (plan/activations.hpp), and a
//             reserve for the CUDA context, library workspaces and allocator slack;
//   communication per step: the data-parallel collectives (DDP: all-reduce of the fp32 gradients in
//             the planner's buckets; ZeRO-1/2: reduce-scatter per unit, all-gather of the updated
//             values; ZeRO-3: a gather per unit in forward and again in backward (once for the root
//             unit and for the last block, kept from forward to backward), reduce-scatter per
//             unit, every micro-batch) and the tensor-parallel all-reduces (2 per block and one for
//             the embedding, forward and backward, and the recomputed forward's under full
//             checkpointing), each timed by topo::CostModel's fastest algorithm. The t data groups
//             of a TP-t layout run at once over the same links: each is timed as a collective of
//             its message over the whole topology, which moves the same bytes per rank;
//   compute   training FLOPs (6N + 12LCT per token, plus what checkpointing recomputes: a block's
//             forward under full, the attention scores under selective) over the GPU's
//             dense peak for the precision times an efficiency the user sets (the MFU to expect);
//   step      compute + tensor-parallel communication (on the critical path) + the part of the
//             data-parallel communication that backward does not hide (DDP and ZeRO-1 reduce once,
//             in the last micro-batch's backward; ZeRO-2 every micro-batch's, behind all of the
//             backward passes), or for ZeRO-3 the whole step (its gathers are prefetched), and
//             ZeRO-1/2's gather after the optimizer.
// It recommends the layout with the most tokens per second over the job (micro_batch is per model
// replica, so the global batch is micro_batch x grad_accum x data ranks) whose memory fits in the
// GPU's memory less a headroom, and
// gives every other layout a one-line reason. These are predictions: the activation model is fitted
// on the CPU, the compute on a peak table and an efficiency, the network on the cost model.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "loom/nn/gpt.hpp"
#include "loom/optim/optimizer.hpp"
#include "loom/plan/activations.hpp"
#include "loom/shard/memory.hpp"
#include "loom/topo/topology.hpp"

namespace loom::plan {

// A GPU's dense tensor-core peak in TFLOP/s for "fp32", "tf32", "fp16" or "bf16" (no sparsity), by
// architecture and name: V100, A100, H100/H200 (SXM; PCIe and NVL parts are lower: set
// PlanRequest::peak_tflops). Empty when the GPU is not in the table.
std::optional<double> peak_tflops(const topo::Gpu& gpu, const std::string& precision);

struct PlanRequest {
  nn::GPTConfig model;                    // its checkpointing is ignored: `checkpointing` below
  std::string precision = "bf16";         // fp32, tf32, fp16 or bf16 (storage 16-bit for the last two)
  optim::OptimizerKind optimizer = optim::OptimizerKind::adamw;
  std::int64_t micro_batch = 8;           // sequences per rank per micro-batch
  std::int64_t grad_accum = 1;            // micro-batches per step
  topo::Topology topology;                // every rank runs on a GPU of it
  double efficiency = 0.45;               // the fraction of the peak training reaches
  double peak_tflops = 0;                 // > 0: instead of the table
  std::int64_t memory_bytes = 0;          // > 0: per-GPU memory instead of the topology's
  double headroom = 0.10;                 // the fraction of memory a layout must leave free
  std::int64_t reserved_bytes = 2LL << 30; // CUDA context, cuBLAS/cuDNN workspaces, fragmentation
  std::vector<int> tensor_sizes{1, 2, 4, 8};
  std::vector<int> stages{0, 1, 2, 3};
  std::vector<nn::ActivationCheckpointing> checkpointing{nn::ActivationCheckpointing::none,
                                                         nn::ActivationCheckpointing::selective,
                                                         nn::ActivationCheckpointing::full};
};

struct LayoutPlan {
  int tensor = 1, data = 1, stage = 0;
  nn::ActivationCheckpointing checkpointing = nn::ActivationCheckpointing::none;
  bool possible = true;                   // false: the layout cannot run at all (reason says why)
  shard::ModelStateBytes model_state;     // per rank; buffers: ZeRO's gradient pool and gathered values
  ActivationBytes activations;            // per rank, one micro-batch
  std::int64_t reserved = 0;
  std::int64_t capacity = 0;              // the GPU's memory
  std::int64_t data_bytes = 0;            // bytes in data-parallel collectives per rank per step
  std::int64_t tensor_bytes = 0;          // bytes in tensor-parallel all-reduces per rank per step
  double data_seconds = 0, data_exposed_seconds = 0, tensor_seconds = 0, compute_seconds = 0;
  double recompute_seconds = 0;           // the part of compute_seconds that checkpointing adds
  double step_seconds = 0, tokens_per_second = 0;
  std::string reason;                     // why it was not recommended (empty for the recommendation)
  std::int64_t total() const noexcept { return model_state.total() + activations.total() + reserved; }
  std::int64_t usable(double headroom) const noexcept {
    return static_cast<std::int64_t>(static_cast<double>(capacity) * (1.0 - headroom));
  }
  std::string name() const;               // "TP 2 x DP 64, ZeRO-3, selective"
};

struct PlanResult {
  PlanRequest request;
  int ranks = 0, ranks_per_host = 0;
  std::string gpu;                        // the GPU's name
  double peak_tflops = 0;
  std::vector<LayoutPlan> layouts;
  std::optional<std::size_t> recommended; // index into layouts; empty when nothing fits
};

// A cluster of `gpus` GPUs of a kind the peak table knows ("A100", "H100", "H200"), as HGX
// servers of 8 with NVSwitch and a 400 Gb/s NIC per GPU (A100: 200 Gb/s), the last one partly
// filled: what right-sizing reports compare a job with. Throws naming an unknown kind.
topo::Topology hgx_cluster(const std::string& kind, int gpus);

// Throws an invalid_argument Error naming the problem: a topology without GPUs, an unknown
// precision, a GPU missing from the peak table without peak_tflops, an invalid model or batch.
PlanResult plan(const PlanRequest& request);

// The padded element counts of a GPT's parameter-space units (unit 0: wte's rows of this tensor
// rank, wpe and ln_f; then one per block, split by tensor parallelism) at `ranks` data ranks,
// as model::ParameterSpace lays them out for the built model.
std::vector<std::int64_t> gpt_unit_elements(const nn::GPTConfig& model, int tensor, int ranks);

// The report: a table (one row per layout, memory in GiB by category, communication and step
// time), the recommendation and each rejection's reason; and the same as JSON text.
std::string format_plan(const PlanResult& result);
inline double gib(std::int64_t bytes) { return static_cast<double>(bytes) / (1LL << 30); }
std::string fixed(double value, int digits);  // "%.*f"
std::string plan_json(const PlanResult& result);

}  // namespace loom::plan
