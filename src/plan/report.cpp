// loom-plan's table and JSON. The table has one row per layout (memory per rank in GiB by category,
// communication and step time), then the recommendation and one line per rejected layout.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "loom/plan/plan.hpp"

namespace loom::plan {

namespace {

const char* optimizer_name(optim::OptimizerKind kind) {
  return kind == optim::OptimizerKind::adamw ? "AdamW" : kind == optim::OptimizerKind::sgd_momentum ? "SGD with momentum" : "SGD";
}

std::string row(const char* format, auto... values) {
  char text[512];
  std::snprintf(text, sizeof text, format, values...);
  return text;
}

}  // namespace

std::string format_plan(const PlanResult& r) {
  const PlanRequest& q = r.request;
  std::string out;
  out += row("model: %lld layers, %lld heads, width %lld, context %lld, vocab %lld (%.2fB parameters), %s, %s\n",
             static_cast<long long>(q.model.layers), static_cast<long long>(q.model.heads),
             static_cast<long long>(q.model.channels), static_cast<long long>(q.model.context),
             static_cast<long long>(q.model.vocab_size), static_cast<double>(q.model.parameter_count()) / 1e9,
             q.precision.c_str(), optimizer_name(q.optimizer));
  out += row("batch: %lld sequences per model replica x %lld micro-batch(es); %d ranks, %d per host, %s (%.1f GiB, %.0f TFLOP/s "
             "%s peak x %.2f efficiency), %.0f%% headroom, %.1f GiB reserved per GPU\n",
             static_cast<long long>(q.micro_batch), static_cast<long long>(q.grad_accum), r.ranks, r.ranks_per_host,
             r.gpu.c_str(), gib(r.layouts.empty() ? 0 : r.layouts.front().capacity), r.peak_tflops, q.precision.c_str(),
             q.efficiency, q.headroom * 100, gib(q.reserved_bytes));
  out += row("%-36s %7s %7s %7s %7s %7s %7s %8s %8s %8s %8s %12s\n", "layout (GiB per rank)", "params", "grads", "optim",
             "buffers", "activ", "total", "dp GB", "tp GB", "comm ms", "step ms", "tokens/s");
  for (std::size_t i = 0; i < r.layouts.size(); ++i) {
    const LayoutPlan& l = r.layouts[i];
    if (!l.possible) continue;
    const bool best = r.recommended && *r.recommended == i;
    const bool fits = l.total() <= l.usable(q.headroom);
    out += row("%-36s %7.2f %7.2f %7.2f %7.2f %7.2f %6.1f%s %8.2f %8.2f %8.1f %8.1f %12.0f%s\n", l.name().c_str(),
               gib(l.model_state.values), gib(l.model_state.gradients), gib(l.model_state.optimizer()),
               gib(l.model_state.buffers), gib(l.activations.total()), gib(l.total()), fits ? " " : "!",
               static_cast<double>(l.data_bytes) / 1e9, static_cast<double>(l.tensor_bytes) / 1e9,
               (l.data_exposed_seconds + l.tensor_seconds) * 1e3, l.step_seconds * 1e3, l.tokens_per_second,
               best ? "  <- recommended" : "");
  }
  out += "(! does not fit; comm ms: the exposed data-parallel part plus the tensor-parallel all-reduces)\n";
  if (r.recommended) {
    const LayoutPlan& b = r.layouts[*r.recommended];
    out += row("recommended: %s: %.1f of %.1f GiB usable per GPU, %.1f ms per step, %.0f tokens/s\n", b.name().c_str(),
               gib(b.total()), gib(b.usable(q.headroom)), b.step_seconds * 1e3, b.tokens_per_second);
  } else {
    out += "recommended: nothing fits; add GPUs, checkpoint activations, shard further or shrink the micro-batch\n";
  }
  for (std::size_t i = 0; i < r.layouts.size(); ++i) {
    if (r.recommended && *r.recommended == i) continue;
    out += "  " + r.layouts[i].name() + ": " + r.layouts[i].reason + "\n";
  }
  return out;
}

std::string plan_json(const PlanResult& r) {
  const PlanRequest& q = r.request;
  nlohmann::json layouts = nlohmann::json::array();
  for (std::size_t i = 0; i < r.layouts.size(); ++i) {
    const LayoutPlan& l = r.layouts[i];
    layouts.push_back({{"name", l.name()}, {"tensor", l.tensor}, {"data", l.data}, {"zero_stage", l.stage},
                       {"activation_checkpointing", nn::to_string(l.checkpointing)}, {"possible", l.possible},
                       {"recommended", r.recommended && *r.recommended == i}, {"reason", l.reason},
                       {"memory_bytes",
                        {{"parameters", l.model_state.values}, {"gradients", l.model_state.gradients},
                         {"optimizer", l.model_state.optimizer()}, {"unit_buffers", l.model_state.buffers},
                         {"activations", l.activations.total()}, {"activations_blocks", l.activations.blocks},
                         {"activations_attention", l.activations.attention}, {"activations_logits", l.activations.logits},
                         {"reserved", l.reserved}, {"total", l.total()}, {"capacity", l.capacity},
                         {"usable", l.usable(q.headroom)}}},
                       {"data_parallel_bytes", l.data_bytes}, {"tensor_parallel_bytes", l.tensor_bytes},
                       {"data_parallel_seconds", l.data_seconds}, {"data_parallel_exposed_seconds", l.data_exposed_seconds},
                       {"tensor_parallel_seconds", l.tensor_seconds}, {"compute_seconds", l.compute_seconds},
                       {"recompute_seconds", l.recompute_seconds}, {"step_seconds", l.step_seconds}, {"tokens_per_second", l.tokens_per_second}});
  }
  nlohmann::json out = {
      {"model", {{"layers", q.model.layers}, {"heads", q.model.heads}, {"channels", q.model.channels},
                 {"context", q.model.context}, {"vocab", q.model.vocab_size}, {"parameters", q.model.parameter_count()}}},
      {"precision", q.precision}, {"optimizer", optimizer_name(q.optimizer)}, {"micro_batch", q.micro_batch}, {"grad_accum", q.grad_accum},
      {"ranks", r.ranks}, {"ranks_per_host", r.ranks_per_host}, {"gpu", r.gpu}, {"peak_tflops", r.peak_tflops},
      {"efficiency", q.efficiency}, {"headroom", q.headroom}, {"reserved_bytes", q.reserved_bytes},
      {"recommended", r.recommended ? nlohmann::json(r.layouts[*r.recommended].name()) : nlohmann::json(nullptr)},
      {"layouts", layouts}};
  return out.dump(1);
}

}  // namespace loom::plan
