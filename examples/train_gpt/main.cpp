// train_gpt: trains a GPT-2 style model with loom in one process, on the CPU or a GPU, in
// fp32/tf32/fp16/bf16. By default it learns 2-digit addition (built in, nothing to download) and
// reports exact-match accuracy; --data text:FILE trains on any text file, --data shards:... on
// llm.c token shards. One log line per step; checkpoints with --checkpoint-dir, --resume.
//   build/examples/train_gpt/train_gpt --steps 400
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <string>

#include "data_setup.hpp"
#include "loom/core/error.hpp"
#include "loom/core/gpu_info.hpp"
#include "loom/io/checkpoint.hpp"
#include "loom/loom.hpp"
#include "run_config.hpp"

namespace {

// Dense tensor-core peak of known GPUs in TFLOP/s for the precision, 0 when unknown (no MFU).
double peak_tflops(const loom::Device& device, const std::string& precision) {
  if (!device.is_cuda()) return 0;
  const std::string name = loom::cuda_device_properties(device.index()).name;
  const bool half = precision == "bf16" || precision == "fp16";
  if (name.find("H100") != std::string::npos || name.find("H200") != std::string::npos) {
    return half ? 989 : precision == "tf32" ? 494 : 67;
  }
  if (name.find("A100") != std::string::npos) return half ? 312 : precision == "tf32" ? 156 : 19.5;
  return 0;
}

void print_evaluation(std::int64_t step, const train_gpt::Evaluation& e) {
  std::printf("eval step %lld | loss %.4f", static_cast<long long>(step), e.loss);
  if (!e.metric_name.empty()) std::printf(" | %s %.1f%%", e.metric_name.c_str(), 100.0 * e.metric);
  std::printf("\n");
}

int run(const train_gpt::RunConfig& config) {
  const loom::Device device = loom::Device::parse(config.device);
  loom::nn::GPTConfig model_config = config.model;
  if (config.data == "addition" || config.data.starts_with("text:")) model_config.vocab_size = 256;
  loom::nn::GPT model(model_config, loom::nn::Precision::parse(config.precision), device, config.seed);
  train_gpt::RunData data(config);
  loom::train::Trainer trainer(model, data.train(), config.trainer_options());
  std::printf("%s\n", loom::to_string(loom::build_info()).c_str());
  std::printf("model: %lld layers, %lld heads, width %lld, context %lld, vocab %lld (%lld parameters), %s on %s\n",
              static_cast<long long>(model_config.layers), static_cast<long long>(model_config.heads),
              static_cast<long long>(model_config.channels), static_cast<long long>(model_config.context),
              static_cast<long long>(model_config.vocab_size), static_cast<long long>(model_config.parameter_count()),
              config.precision.c_str(), device.to_string().c_str());
  if (config.resume) {
    loom::require(!config.checkpoint_dir.empty(), "--resume needs --checkpoint-dir");
    if (loom::io::latest_checkpoint(config.checkpoint_dir)) {
      const loom::io::TrainingProgress progress = loom::io::load_checkpoint(config.checkpoint_dir, model, trainer.optimizer());
      trainer.restore(progress);
      std::printf("resumed from %s at step %lld\n", loom::io::latest_checkpoint(config.checkpoint_dir)->c_str(),
                  static_cast<long long>(progress.step));
    } else {
      std::printf("no checkpoint in %s yet: starting from scratch\n", config.checkpoint_dir.c_str());
    }
  }
  const std::int64_t steps_per_seq = config.seq_len > 0 ? config.seq_len : model_config.context;
  const double peak = peak_tflops(device, config.precision);
  const double flops_per_token = model_config.training_flops_per_token(steps_per_seq);
  std::int64_t saved_step = trainer.steps_done();  // nothing new to save before a step has run
  auto save = [&] {
    if (config.checkpoint_dir.empty() || trainer.steps_done() == saved_step) return;
    const std::string where = loom::io::save_checkpoint(config.checkpoint_dir, model, trainer.optimizer(), trainer.progress());
    saved_step = trainer.steps_done();
    std::printf("saved checkpoint %s\n", where.c_str());
  };
  while (trainer.steps_done() < config.steps) {
    const loom::train::StepResult r = trainer.step();
    if (r.step % config.log_every == 0 || r.step == config.steps) {
      const double tokens_per_second = static_cast<double>(r.tokens) / r.seconds;
      std::printf("step %5lld/%lld | loss %.4f | lr %.2e | norm %.4f | %7.1f ms | %8.0f tok/s", static_cast<long long>(r.step),
                  static_cast<long long>(config.steps), r.loss, r.lr, r.grad_norm, r.seconds * 1e3, tokens_per_second);
      if (peak > 0) std::printf(" | MFU %.1f%%", 100.0 * tokens_per_second * flops_per_token / (peak * 1e12));
      if (r.skipped) std::printf(" | skipped (non-finite gradient; loss scale %g)", trainer.loss_scaler().scale());
      std::printf("\n");
      std::fflush(stdout);
    }
    if (config.checkpoint_every > 0 && r.step % config.checkpoint_every == 0 && r.step < config.steps) save();
    if (config.eval_every > 0 && r.step % config.eval_every == 0 && r.step < config.steps) {
      print_evaluation(r.step, data.evaluate(model, false));
    }
  }
  save();
  const train_gpt::Evaluation final_eval = data.evaluate(model, true);
  print_evaluation(trainer.steps_done(), final_eval);
  if (trainer.skipped_steps() > 0) {
    std::printf("skipped steps (non-finite gradients): %lld\n", static_cast<long long>(trainer.skipped_steps()));
  }
  std::printf("sample:\n%s\n", final_eval.sample.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("train_gpt: train a GPT-2 style model with loom (default: the built-in addition task on the CPU)");
  train_gpt::RunConfig config;
  config.add_to(app);
  CLI11_PARSE(app, argc, argv);
  try {
    return run(config);
  } catch (const std::exception& error) {  // loom::Error, and file-system or allocation failures
    std::fprintf(stderr, "train_gpt: %s\n", error.what());
    return 1;
  }
}
