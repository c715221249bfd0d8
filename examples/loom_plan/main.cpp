// loom-plan: before launch, which layout of a GPT fits on a cluster and how fast each would run
// (plan/plan.hpp): per-rank memory by category, communication and step time for DDP, ZeRO-1/2/3,
// tensor parallelism 1/2/4/8 inside a host and every activation-checkpointing mode, the fastest
// layout that fits, and why each other one was not chosen.
//   build/examples/loom_plan/loom-plan --model 7b --file tests/fixtures/topo/cluster-16x-hgx-h100.json
//   build/examples/loom_plan/loom-plan --parameters 13e9 --layers 40 --micro-batch 4 --json
// The topology is detected on this machine when no --file (or LOOM_TOPO_FILE) is given.
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "loom/core/error.hpp"
#include "loom/plan/plan.hpp"
#include "loom/topo/detect.hpp"
#include "loom/topo/topology_json.hpp"

namespace {

// GPT-2 small and XL, and GPT-style 7B- and 70B-class models (4x MLP, learned positions).
loom::nn::GPTConfig preset(const std::string& name) {
  loom::nn::GPTConfig c;
  c.vocab_size = 50257;
  c.context = 1024;
  if (name == "gpt2") { c.layers = 12; c.heads = 12; c.channels = 768; }
  else if (name == "gpt2-xl") { c.layers = 48; c.heads = 25; c.channels = 1600; }
  else if (name == "7b") { c.layers = 32; c.heads = 32; c.channels = 4096; c.context = 2048; }
  else { c.layers = 80; c.heads = 64; c.channels = 8192; c.context = 2048; }  // 70b
  return c;
}

loom::nn::ActivationCheckpointing mode_of(const std::string& text) { return loom::nn::parse_activation_checkpointing(text); }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("loom-plan: which layout of a GPT fits on a cluster, and how fast");
  std::string model_name = "gpt2", file, precision = "bf16", optimizer = "adamw";
  double parameters = 0, memory_gib = 0, reserved_gib = 2;
  std::int64_t layers = 0, heads = 0, channels = 0, context = 0, vocab = 0;
  loom::plan::PlanRequest request;
  std::vector<std::string> modes{"none", "selective", "full"};
  bool json = false;
  app.add_option("--model", model_name, "gpt2, gpt2-xl, 7b or 70b (the fields below override it)")
      ->check(CLI::IsMember({"gpt2", "gpt2-xl", "7b", "70b"}));
  app.add_option("--parameters", parameters, "a parameter count (with --layers: the width that gives it, 128 per head)")
      ->check(CLI::PositiveNumber);
  app.add_option("--layers", layers)->check(CLI::PositiveNumber);
  app.add_option("--heads", heads)->check(CLI::PositiveNumber);
  app.add_option("--channels", channels)->check(CLI::PositiveNumber);
  app.add_option("--context", context, "sequence length")->check(CLI::PositiveNumber);
  app.add_option("--vocab", vocab)->check(CLI::PositiveNumber);
  app.add_option("--file", file, "topology file (also LOOM_TOPO_FILE); default: detect this machine");
  app.add_option("--precision", precision)->check(CLI::IsMember({"fp32", "tf32", "fp16", "bf16"}));
  app.add_option("--optimizer", optimizer)->check(CLI::IsMember({"adamw", "sgd-momentum", "sgd"}));
  app.add_option("--micro-batch", request.micro_batch, "sequences per rank per micro-batch")->check(CLI::PositiveNumber);
  app.add_option("--grad-accum", request.grad_accum, "micro-batches per step")->check(CLI::PositiveNumber);
  app.add_option("--efficiency", request.efficiency, "fraction of the GPU's peak to expect (MFU)")->check(CLI::Range(0.01, 1.0));
  app.add_option("--peak-tflops", request.peak_tflops, "the GPU's dense TFLOP/s in this precision (default: table)")
      ->check(CLI::PositiveNumber);
  app.add_option("--memory-gib", memory_gib, "per-GPU memory (default: the topology's)")->check(CLI::PositiveNumber);
  app.add_option("--headroom", request.headroom, "fraction of memory to leave free")->check(CLI::Range(0.0, 0.9));
  app.add_option("--reserved-gib", reserved_gib, "per GPU for the CUDA context, workspaces and fragmentation")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--tp", request.tensor_sizes, "tensor-parallel sizes to consider")->delimiter(',');
  app.add_option("--zero", request.stages, "ZeRO stages to consider (0: DDP)")->delimiter(',')->check(CLI::Range(0, 3));
  app.add_option("--activation-checkpointing", modes, "modes to consider")->delimiter(',')
      ->check(CLI::IsMember({"none", "selective", "full"}));
  app.add_flag("--json", json, "print the plan as JSON");
  CLI11_PARSE(app, argc, argv);
  try {
    loom::nn::GPTConfig& m = request.model;
    m = preset(model_name);
    if (layers > 0) m.layers = layers;
    if (parameters > 0) {
      loom::require(layers > 0, "loom-plan: --parameters needs --layers");
      // 12 L C^2 + V C parameters: the width, rounded to a multiple of 128 (one head's).
      const double v = static_cast<double>(vocab > 0 ? vocab : m.vocab_size), l = static_cast<double>(layers);
      const double c = (-v + std::sqrt(v * v + 48 * l * parameters)) / (24 * l);
      m.channels = std::max<std::int64_t>(128, std::llround(c / 128) * 128);
      m.heads = m.channels / 128;
    }
    if (heads > 0) m.heads = heads;
    if (channels > 0) m.channels = channels;
    if (context > 0) m.context = context;
    if (vocab > 0) m.vocab_size = vocab;
    request.precision = precision;
    request.optimizer = optimizer == "adamw" ? loom::optim::OptimizerKind::adamw
                        : optimizer == "sgd" ? loom::optim::OptimizerKind::sgd
                                             : loom::optim::OptimizerKind::sgd_momentum;
    request.memory_bytes = static_cast<std::int64_t>(memory_gib * (1LL << 30));
    request.reserved_bytes = static_cast<std::int64_t>(reserved_gib * (1LL << 30));
    request.checkpointing.clear();
    for (const std::string& mode : modes) request.checkpointing.push_back(mode_of(mode));
    if (file.empty() && std::getenv("LOOM_TOPO_FILE") != nullptr) file = std::getenv("LOOM_TOPO_FILE");
    request.topology = file.empty() ? loom::topo::detect_topology(nullptr).topology : loom::topo::load_topology(file);
    const loom::plan::PlanResult result = loom::plan::plan(request);
    if (json) {
      std::printf("%s\n", loom::plan::plan_json(result).c_str());
    } else {
      std::printf("topology: %s\n%s", file.empty() ? "detected" : file.c_str(), loom::plan::format_plan(result).c_str());
    }
    return 0;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "loom-plan: %s\n", error.what());
    return 2;
  }
}
