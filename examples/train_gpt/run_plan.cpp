#include "run_plan.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "loom/comm/agreement.hpp"
#include "loom/core/allocator.hpp"
#include "loom/core/error.hpp"
#include "loom/core/gpu_info.hpp"
#include "loom/plan/plan.hpp"
#include "loom/topo/detect.hpp"

namespace train_gpt {

namespace {

double mib(std::int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

// One forward and backward at `batch` sequences of token 0 (nothing is learned: the gradients
// are zeroed after). False when it runs out of memory.
bool probe(loom::nn::GPT& model, std::int64_t batch, std::int64_t steps) {
  const std::vector<std::int32_t> zeros(static_cast<std::size_t>(batch * steps), 0);
  const loom::Tensor tokens = loom::Tensor::from_vector(zeros, {batch, steps}).to(model.device());
  try {
    model.forward(tokens, tokens);
    model.backward();
  } catch (const loom::Error& error) {
    if (error.category() != loom::ErrorCategory::out_of_memory) throw;
    model.zero_grad();
    return false;
  }
  model.zero_grad();
  return true;
}

}  // namespace

RunMemory predict_run_memory(const loom::nn::GPT& model, const RunShape& shape, std::int64_t micro_batch) {
  RunMemory m;
  const loom::Device device = model.device();
  if (device.is_cuda()) {
    constexpr std::int64_t reserve = 2LL << 30;  // the CUDA context, cuBLAS/cuDNN workspaces (as loom-plan)
    m.capacity = static_cast<std::int64_t>(loom::cuda_device_properties(device.index()).total_memory_bytes) - reserve;
    m.source = device.to_string() + "'s memory less 2 GiB reserved,";
  } else if (loom::cpu_memory_limit() > 0) {
    m.capacity = loom::cpu_memory_limit();
    m.source = "LOOM_MEMORY_LIMIT";
  } else {
    m.capacity = static_cast<std::int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
    m.source = "the machine's RAM";
  }
  m.model_state = loom::train::predict_model_state(model, shape.options, shape.data_ranks);
  // On the CPU the allocator counts the whole process: what it holds now that is not model state
  // or activations (both predicted).
  if (device.is_cpu()) {
    const loom::CpuMemoryStats now = loom::cpu_memory_stats();
    for (const loom::MemoryCategory c :
         {loom::MemoryCategory::other, loom::MemoryCategory::communication, loom::MemoryCategory::workspace}) {
      m.other += now.live_by_category[static_cast<std::size_t>(c)];
    }
  }
  m.activations = loom::plan::predict_activations(
      {.model = model.config(), .batch = micro_batch, .steps = shape.seq_len > 0 ? shape.seq_len : model.config().context,
       .storage_bytes = static_cast<std::int64_t>(loom::dtype_size(model.precision().storage)),
       .tensor = shape.tensor_ranks, .cpu = device.is_cpu()});
  return m;
}

std::string plan_line(const RunMemory& m) {
  char line[512];
  std::snprintf(line, sizeof line, "plan: %.1f of %.1f MiB usable per rank (%s %.1f MiB less 10%%): model state %.1f "
                "(values %.1f, gradients %.1f, optimizer %.1f, unit buffers %.1f), activations %.1f (blocks %.1f, "
                "attention %.1f, logits %.1f), other %.1f%s",
                mib(m.total()), mib(m.usable()), m.source.c_str(), mib(m.capacity), mib(m.model_state.total()),
                mib(m.model_state.values), mib(m.model_state.gradients), mib(m.model_state.optimizer()),
                mib(m.model_state.buffers), mib(m.activations.total()), mib(m.activations.blocks),
                mib(m.activations.attention), mib(m.activations.logits), mib(m.other),
                m.total() > m.usable() ? ": DOES NOT FIT (--batch auto or --activation-checkpointing)" : "");
  return line;
}

std::string plan_report(const loom::nn::GPT& model, const RunShape& shape, std::int64_t micro_batch,
                        std::int64_t grad_accumulation, const std::string& precision) {
  const RunMemory run = predict_run_memory(model, shape, micro_batch);
  std::string out = plan_line(run) + "\n";
  char line[256];
  std::snprintf(line, sizeof line, "%-12s %-10s %14s %14s %12s %6s\n", "layout", "recompute", "model state MiB",
                "activations MiB", "total MiB", "fits");
  out += line;
  const loom::nn::ActivationCheckpointing modes[] = {loom::nn::ActivationCheckpointing::none,
                                                     loom::nn::ActivationCheckpointing::selective,
                                                     loom::nn::ActivationCheckpointing::full};
  for (int stage = 0; stage <= (shape.data_ranks > 1 ? 3 : 0); ++stage) {
    for (const loom::nn::ActivationCheckpointing mode : modes) {
      RunMemory m = run;
      loom::train::TrainerOptions options = shape.options;
      options.zero = stage;
      m.model_state = loom::train::predict_model_state(model, options, shape.data_ranks);
      loom::nn::GPTConfig config = model.config();
      config.checkpointing = mode;
      m.activations = loom::plan::predict_activations(
          {.model = config, .batch = micro_batch, .steps = shape.seq_len > 0 ? shape.seq_len : config.context,
           .storage_bytes = static_cast<std::int64_t>(loom::dtype_size(model.precision().storage)),
           .tensor = shape.tensor_ranks, .cpu = model.device().is_cpu()});
      const bool this_run = stage == shape.options.zero && mode == model.config().checkpointing;
      std::snprintf(line, sizeof line, "%-12s %-10s %14.1f %14.1f %12.1f %6s%s\n",
                    stage == 0 ? "DDP" : ("ZeRO-" + std::to_string(stage)).c_str(), loom::nn::to_string(mode).c_str(),
                    mib(m.model_state.total()), mib(m.activations.total()), mib(m.total()),
                    m.total() <= m.usable() ? "yes" : "no", this_run ? "  <- this run" : "");
      out += line;
    }
  }
  if (model.device().is_cuda()) {
    loom::plan::PlanRequest request;
    request.model = model.config();
    request.precision = precision;
    request.optimizer = shape.options.optimizer != loom::optim::OptimizerKind::adamw && shape.options.sgd.momentum > 0
                            ? loom::optim::OptimizerKind::sgd_momentum
                            : shape.options.optimizer;
    request.micro_batch = micro_batch;
    request.grad_accum = grad_accumulation;
    request.topology = loom::topo::detect_topology(nullptr).topology;
    try {
      out += "\nloom-plan for this machine:\n" + loom::plan::format_plan(loom::plan::plan(request));
    } catch (const loom::Error& error) {
      out += std::string("\nloom-plan for this machine: ") + error.what() + "\n";
    }
  }
  return out;
}

BatchChoice choose_batch(loom::nn::GPT& model, const RunShape& shape, std::int64_t per_step,
                         loom::comm::Communicator* world) {
  const std::int64_t steps = shape.seq_len > 0 ? shape.seq_len : model.config().context;
  auto predict = [&](std::int64_t batch) { return predict_run_memory(model, shape, batch); };
  std::vector<std::int64_t> divisors;  // largest first
  for (std::int64_t b = per_step; b >= 1; --b) {
    if (per_step % b == 0) divisors.push_back(b);
  }
  std::size_t pick = 0;
  auto fits = [&](std::int64_t batch) {
    const RunMemory m = predict(batch);
    return m.total() <= m.usable();
  };
  while (pick < divisors.size() && !fits(divisors[pick])) ++pick;
  const bool can_probe = shape.options.zero < 2 && shape.tensor_ranks == 1 && model.device().is_cpu();
  std::string probed = can_probe ? "a probe step passed" : "no probe step (ZeRO-2/3, tensor parallelism or a GPU)";
  if (can_probe && pick < divisors.size()) {
    // The trainer allocates the rest of the model state (the optimizer's) later: the probe runs
    // under a cap lowered by it, or by 10% of the machine's RAM without one.
    const loom::CpuMemoryStats now = loom::cpu_memory_stats();
    std::int64_t held = 0;
    for (const loom::MemoryCategory c :
         {loom::MemoryCategory::parameters, loom::MemoryCategory::gradients, loom::MemoryCategory::optimizer}) {
      held += now.live_by_category[static_cast<std::size_t>(c)];
    }
    const RunMemory first = predict(divisors[pick]);
    const std::int64_t cap = loom::cpu_memory_limit();
    const std::int64_t lowered = (cap > 0 ? cap : first.capacity) - std::max<std::int64_t>(0, first.model_state.total() - held);
    struct Restore {  // the cap as it was, whatever the probe throws
      std::int64_t cap;
      ~Restore() { loom::set_cpu_memory_limit(cap); }
    } restore{cap};
    loom::set_cpu_memory_limit(std::max<std::int64_t>(1, lowered));
    while (pick < divisors.size() && !probe(model, divisors[pick], steps)) {
      probed = "the probe ran out of memory at " + std::to_string(divisors[pick]) + ", stepped down";
      ++pick;
    }
  }
  std::int64_t chosen = pick < divisors.size() ? divisors[pick] : 0;
  if (world != nullptr) chosen = loom::comm::all_reduce_value(*world, chosen, loom::comm::ReduceOp::min);
  if (chosen <= 0) {
    const RunMemory one = predict(1);
    loom::fail(loom::ErrorCategory::out_of_memory, "--batch auto: not even one sequence of ", steps, " tokens fits: ",
               plan_line(one).substr(6));
  }
  const RunMemory at = predict(chosen);
  std::string larger;  // why not the next size up
  const auto it = std::find(divisors.begin(), divisors.end(), chosen);
  if (it != divisors.begin()) {
    larger = "; " + std::to_string(*(it - 1)) + " would need " + std::to_string(std::llround(mib(predict(*(it - 1)).total()))) +
             " MiB";
  }
  char line[640];
  std::snprintf(line, sizeof line, "batch auto: %lld sequences per micro-batch x %lld micro-batches = %lld per rank per "
                "step; predicted %.1f of %.1f MiB usable (%s %.1f MiB less 10%%): model state %.1f, activations %.1f, "
                "other %.1f%s; %s",
                static_cast<long long>(chosen), static_cast<long long>(per_step / chosen),
                static_cast<long long>(per_step), mib(at.total()), mib(at.usable()), at.source.c_str(), mib(at.capacity),
                mib(at.model_state.total()), mib(at.activations.total()), mib(at.other), larger.c_str(), probed.c_str());
  return {chosen, per_step / chosen, line};
}

}  // namespace train_gpt
