#include "ddp_worker.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include "bench_report.hpp"
#include "loom/core/error.hpp"
#include "loom/ddp/gradient_reducer.hpp"
#include "loom/train/trainer.hpp"
#include "repeat_batch.hpp"

namespace loom::bench {

namespace {

train::TrainerOptions step_options(ddp::ReducerOptions reducer = {}) {
  train::TrainerOptions options;
  options.schedule = {.max_lr = 1e-4f, .min_lr = 1e-5f, .warmup = 0, .total = 1000000};
  options.reducer = std::move(reducer);
  return options;
}

struct StepTimes {
  double step = 0, compute = 0, synchronize_wait = 0;  // medians, seconds
};

// Data-parallel steps alternating with the same step without communication (its backward inside
// no_sync(), every rank at once: the same contention for the cores), so that the machine's drift
// affects both alike. Medians of `steps` of each after `warmup`.
StepTimes time_steps(nn::GPT& model, data::BatchSource& data, const DdpWorkload& w, train::Trainer& parallel) {
  train::Trainer alone(model, data, step_options());  // after `parallel`, which laid the space out
  ddp::GradientReducer& reducer = *parallel.reducer();
  auto alone_step = [&] {
    const auto skip = reducer.no_sync();
    return alone.step().seconds;
  };
  for (int i = 0; i < w.warmup; ++i) {
    alone_step();
    parallel.step();
  }
  std::vector<double> step, compute, wait;
  for (int i = 0; i < w.steps; ++i) {
    compute.push_back(alone_step());
    step.push_back(parallel.step().seconds);
    wait.push_back(reducer.stats().synchronize_seconds);
  }
  return {median(step), median(compute), median(wait)};
}

// The reductions of one step with no computation to hide behind: every gradient marked ready in
// backward order, then synchronize().
double time_comm_only(nn::GPT& model, ddp::GradientReducer& reducer, const DdpWorkload& w) {
  const auto& params = model.parameters();
  auto once = [&] {
    for (auto it = params.rbegin(); it != params.rend(); ++it) (*it)->mark_grad_ready();
    reducer.synchronize();
  };
  for (int i = 0; i < w.warmup; ++i) once();
  std::vector<double> seconds;
  for (int i = 0; i < w.steps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    once();
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return median(seconds);
}

ddp::ReducerOptions reducer_options(double bucket_mb) {
  ddp::ReducerOptions options;
  options.bucket_bytes = static_cast<std::int64_t>(bucket_mb * (1 << 20));
  if (bucket_mb == 0) options.first_bucket_bytes = 0;  // one bucket, and one all-reduce, per parameter
  return options;
}

}  // namespace

DdpWorkload named_workload(const std::string& name) {
  DdpWorkload w;
  w.name = name;
  if (name == "default") {  // train_bench's default configuration
    w.model = {.vocab_size = 256, .context = 128, .layers = 4, .heads = 4, .channels = 128};
    w.batch = 8;
  } else if (name == "small-params") {  // 2 + 12 x 16 + 2 = 196 parameter tensors
    w.model = {.vocab_size = 64, .context = 16, .layers = 16, .heads = 2, .channels = 32};
    w.batch = 2;
    w.compare_per_tensor = true;
  } else if (name == "gpt2-124m") {  // for GPUs: GPT-2 small at its full context
    w.model = {.vocab_size = 50257, .context = 1024, .layers = 12, .heads = 12, .channels = 768};
    w.batch = 8;
  } else {
    fail(ErrorCategory::invalid_argument, "ddp_bench: unknown workload '", name,
         "' (default, small-params or gpt2-124m)");
  }
  return w;
}

nlohmann::json measure_ddp(const DdpWorkload& w, World& world) {
  const nn::Precision precision = nn::Precision::parse(w.precision);
  nn::GPT model(w.model, precision, world.device());
  std::mt19937 rng(static_cast<std::uint32_t>(1 + world.rank()));
  RepeatBatch data(random_batch(w.batch, w.model.context, w.model.vocab_size, rng), w.model.vocab_size);
  comm::Communicator& comm = world.comm();

  nlohmann::json row;
  {
    train::Trainer trainer(model, data, step_options(reducer_options(w.bucket_mb)), &comm);
    ddp::GradientReducer& reducer = *trainer.reducer();
    const StepTimes parallel = time_steps(model, data, w, trainer);
    const double comm_only = time_comm_only(model, reducer, w);
    const double tokens = static_cast<double>(w.batch * w.model.context * world.size());
    row = {{"ranks", world.size()},
           {"backend", std::string(comm.backend())},
           {"parameters", model.parameters().size()},
           {"buckets", reducer.stats().buckets},
           {"step_ms", parallel.step * 1e3},
           {"compute_ms", parallel.compute * 1e3},
           // What data parallelism added to the step: communication not hidden, the loss all-reduce,
           // the agreement all-reduce, waiting for slower ranks, and computation slowed by overlap.
           {"exposed_comm_ms", (parallel.step - parallel.compute) * 1e3},
           {"synchronize_wait_ms", parallel.synchronize_wait * 1e3},
           {"comm_only_ms", comm_only * 1e3},
           {"tokens_per_s", tokens / parallel.step}};
  }
  if (w.compare_per_tensor) {
    train::Trainer trainer(model, data, step_options(reducer_options(0)), &comm);
    ddp::GradientReducer& per_tensor = *trainer.reducer();
    row["per_tensor_step_ms"] = time_steps(model, data, w, trainer).step * 1e3;
    row["per_tensor_comm_only_ms"] = time_comm_only(model, per_tensor, w) * 1e3;
    row["per_tensor_buckets"] = per_tensor.stats().buckets;
  }
  return world.rank() == 0 ? row : nlohmann::json::object();
}

std::optional<double> hidden_fraction(double exposed_ms, double comm_only_ms, int ranks, bool oversubscribed,
                                      std::string& why) {
  why.clear();
  if (ranks <= 1) {
    why = "one rank: no communication to hide";
    return std::nullopt;
  }
  if (comm_only_ms <= 0) {
    why = "the communication alone took no measurable time";
    return std::nullopt;
  }
  if (oversubscribed) {
    why = "ranks x threads exceed the cores: computation slows with the communication, which overlap cannot hide";
    return std::nullopt;
  }
  if (exposed_ms > comm_only_ms) {
    char text[160];
    std::snprintf(text, sizeof(text), "the step lost more (%.3f ms) than the communication alone takes (%.3f ms)",
                  exposed_ms, comm_only_ms);
    why = text;
    return std::nullopt;
  }
  // Noise can make the exposed time slightly negative: all of it hidden.
  return std::clamp(1.0 - exposed_ms / comm_only_ms, 0.0, 1.0);
}

}  // namespace loom::bench
