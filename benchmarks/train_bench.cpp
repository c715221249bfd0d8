// train_bench: throughput of loom's GPT training step (forward, backward, AdamW) in tokens/s and
// its model-FLOPs utilisation against the machine's GEMM peak measured in the same run (loom's
// GEMM at --peak-shape in the run's precision: the ceiling the step's GEMMs could reach here).
// Model FLOPs per token: 6 x parameters + 12 x layers x width x sequence (the llm.c/PaLM rule).
// The timed steps run in --rounds rounds, each followed by the peak GEMM, so the step and its
// ceiling are timed moments apart: MFU is the median over rounds of the round's model FLOP rate
// over the round's peak (a noisy VM can run a whole stretch 10-40% slow, and a peak timed once
// then skews every step). So the JSON's `mfu` is not model_gflops / gemm_peak_gflops (the medians of
// all steps and of the rounds' peaks) but the median of `mfu_rounds`.
// On the CPU it also runs PyTorch's step on the same model, batch and thread count
// (benchmarks/peers/torch_gpt.py, when python3-torch is installed; --peer), in the same rounds,
// and reports loom's tokens/s against it.
//
// --activation-checkpointing none,selective,full also measures each mode on its own model in the same run
// (their steps alternating): tokens/s, the step time against `none`, and on the CPU the
// allocator's peak over a step beyond what the model and optimizer keep, against `none` (issue
// 29's targets: full costs <= 35% of the step and removes >= 70% of the activation memory).
#include <CLI/CLI.hpp>
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <random>
#include <string>

#include "bench_report.hpp"
#include "repeat_batch.hpp"
#include "telemetry_overhead.hpp"
#include "torch_peer.hpp"
#include "loom/kernels/cpu_isa.hpp"
#include "loom/data/addition_task.hpp"
#include "loom/core/allocator.hpp"
#include "loom/kernels/gemm.hpp"
#include "loom/loom.hpp"

namespace {

// One Trainer per activation-checkpointing mode, stepped in turn (so that every mode sees the same
// machine); the median step and, on the CPU, the peak bytes a step adds over what stays live.
nlohmann::json compare_checkpointing(loom::nn::GPTConfig config, const loom::nn::Precision& precision,
                                     loom::Device device, std::int64_t batch, int steps, int warmup,
                                     const std::vector<std::string>& modes) {
  struct Run {
    std::unique_ptr<loom::nn::GPT> model;
    std::unique_ptr<loom::bench::RepeatBatch> data;
    std::unique_ptr<loom::train::Trainer> trainer;
    std::vector<double> seconds;
    std::int64_t peak = 0;         // the step's peak: model state, optimizer state and activations
    std::int64_t model_state = 0;  // values, gradients and optimizer state (Trainer::held_model_state)
  };
  std::vector<Run> runs(modes.size());
  std::mt19937 rng(1);
  const loom::data::Batch batch_data = loom::bench::random_batch(batch, config.context, config.vocab_size, rng);
  loom::train::TrainerOptions options;
  options.schedule = {.max_lr = 1e-4f, .min_lr = 1e-5f, .warmup = 0, .total = steps + warmup + 1};
  for (std::size_t m = 0; m < modes.size(); ++m) {
    // Everything this mode's model and trainer allocate, at the peak of a step after warm-up: the
    // earlier modes' bytes are live throughout, so they cancel.
    const std::int64_t before = loom::cpu_memory_stats().live_bytes;
    config.checkpointing = loom::nn::parse_activation_checkpointing(modes[m]);
    runs[m].model = std::make_unique<loom::nn::GPT>(config, precision, device);
    runs[m].data = std::make_unique<loom::bench::RepeatBatch>(batch_data, config.vocab_size);
    runs[m].trainer = std::make_unique<loom::train::Trainer>(*runs[m].model, *runs[m].data, options);
    for (int i = 0; i < warmup; ++i) runs[m].trainer->step();
    loom::reset_cpu_memory_peak();
    runs[m].trainer->step();
    runs[m].peak = loom::cpu_memory_stats().peak_bytes - before;
    runs[m].model_state = runs[m].trainer->held_model_state().persistent();
  }
  for (int i = 0; i < steps; ++i) {
    for (Run& run : runs) run.seconds.push_back(run.trainer->step().seconds);
  }
  const double tokens = static_cast<double>(batch * config.context);
  const double base_step = loom::bench::median(runs.front().seconds);
  auto activations = [](const Run& run) { return static_cast<double>(std::max<std::int64_t>(1, run.peak - run.model_state)); };
  const double base_activations = activations(runs.front());
  const bool cpu = device.is_cpu();
  std::printf("\nactivation checkpointing (same run, steps alternating; memory: the CPU allocator's peak over a "
              "step, and that less the model state)\n");
  std::printf("%-10s %10s %10s %12s %12s %16s %10s\n", "mode", "step ms", "vs first", "tokens/s", "peak MiB",
              "activations MiB", "vs first");
  nlohmann::json rows = nlohmann::json::array();
  for (std::size_t m = 0; m < runs.size(); ++m) {
    const double step = loom::bench::median(runs[m].seconds);
    const double act = activations(runs[m]);
    std::printf("%-10s %10.2f %9.2fx %12.0f %12.2f %16.2f %9.2fx\n", modes[m].c_str(), step * 1e3, step / base_step,
                tokens / step, cpu ? static_cast<double>(runs[m].peak) / (1 << 20) : 0.0,
                cpu ? act / (1 << 20) : 0.0, cpu ? act / base_activations : 0.0);
    rows.push_back({{"mode", modes[m]}, {"step_ms", step * 1e3}, {"step_vs_first", step / base_step},
                    {"tokens_per_s", tokens / step}, {"step_peak_bytes", cpu ? runs[m].peak : 0},
                    {"model_state_bytes", runs[m].model_state},
                    {"activation_bytes", cpu ? runs[m].peak - runs[m].model_state : 0},
                    {"activations_vs_first", cpu ? act / base_activations : 0.0}});
  }
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("train_bench: tokens/s and MFU of loom's GPT training step");
  loom::nn::GPTConfig config;
  config.vocab_size = 256;
  config.context = 128;
  config.layers = 4;
  config.heads = 4;
  config.channels = 128;
  std::string precision_name = "fp32", device_name = "cpu", json_path, peer = "auto", attention = "auto";
  std::vector<std::string> checkpointing_modes{"none"};
  std::int64_t batch = 8, peak_shape = 1024;
  int steps = 20, warmup = 3, rounds = 3;
  app.add_option("--layers", config.layers)->check(CLI::PositiveNumber);
  app.add_option("--heads", config.heads)->check(CLI::PositiveNumber);
  app.add_option("--channels", config.channels)->check(CLI::PositiveNumber);
  app.add_option("--context", config.context, "sequence length (the model's context)")->check(CLI::PositiveNumber);
  app.add_option("--vocab", config.vocab_size)->check(CLI::PositiveNumber);
  app.add_option("--batch", batch)->check(CLI::PositiveNumber);
  app.add_option("--precision", precision_name)->check(CLI::IsMember({"fp32", "tf32", "fp16", "bf16"}));
  app.add_option("--device", device_name, "cpu or cuda:N");
  app.add_option("--steps", steps, "timed steps (the median is reported)")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "untimed steps first")->check(CLI::NonNegativeNumber);
  app.add_option("--peak-shape", peak_shape, "N of the N^3 GEMM that measures the peak")->check(CLI::PositiveNumber);
  app.add_option("--json", json_path, "write the JSON record here");
  app.add_option("--attention", attention, "attention kernel: auto (stored unless a layer's probabilities "
                 "exceed 512 MiB), stored (keeps the T x T probabilities) or fused")->check(CLI::IsMember({"auto", "stored", "fused"}));
  app.add_option("--activation-checkpointing", checkpointing_modes, "modes to compare in the same run, e.g. "
                 "none,selective,full (the first is the baseline; the main step uses it)")
      ->delimiter(',')
      ->check(CLI::IsMember({"none", "selective", "full"}));
  std::vector<std::string> telemetry_modes;
  app.add_option("--telemetry", telemetry_modes, "telemetry configurations to compare in the same run, e.g. "
                 "off,phases,trace,nvml (off first: the baseline; see telemetry_overhead.hpp)")
      ->delimiter(',')
      ->check(CLI::IsMember({"off", "phases", "trace", "nvml"}));
  app.add_option("--peer", peer, "PyTorch's step on the same model in the same run: auto (on the CPU when "
                 "python3-torch is installed), torch (required) or none")->check(CLI::IsMember({"auto", "torch", "none"}));
  app.add_option("--rounds", rounds, "rounds of loom's timed steps, each followed by the peak GEMM (and the peer's run, "
                 "with a peer)")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  try {
    const loom::Device device = loom::Device::parse(device_name);
    const loom::nn::Precision precision = loom::nn::Precision::parse(precision_name);
    config.attention = loom::nn::resolve(loom::nn::parse_attention_kernel(attention), batch, config.heads,
                                         config.context, precision.storage);
    config.checkpointing = loom::nn::parse_activation_checkpointing(checkpointing_modes.front());
    std::mt19937 rng(1);
    loom::nn::GPT model(config, precision, device);
    loom::bench::RepeatBatch data(loom::bench::random_batch(batch, config.context, config.vocab_size, rng), config.vocab_size);
    loom::train::TrainerOptions options;
    options.schedule = {.max_lr = 1e-4f, .min_lr = 1e-5f, .warmup = 0, .total = steps + warmup};
    loom::train::Trainer trainer(model, data, options);
    for (int i = 0; i < warmup; ++i) trainer.step();
    const bool want_peer = peer == "torch" || (peer == "auto" && !device.is_cuda());
    loom::require(!(peer == "torch" && device.is_cuda()), "train_bench: the PyTorch peer runs on the CPU only");
    const loom::bench::TorchPeerRequest request{config, batch, steps, warmup, 1, omp_get_max_threads()};
    std::vector<double> seconds, peer_tokens, round_peaks, round_mfus;
    std::string peer_absent = want_peer ? "" : "not asked for";
    std::optional<nlohmann::json> peer_record;
    const double tokens = static_cast<double>(batch * config.context);
    const double model_flops = tokens * config.training_flops_per_token(config.context);

    // The GEMM ceiling: loom's GEMM at peak_shape^3 in the run's precision and storage.
    const loom::Tensor a = loom::Tensor::zeros({peak_shape, peak_shape}, precision.storage, device);
    const loom::Tensor b = loom::Tensor::zeros({peak_shape, peak_shape}, precision.storage, device);
    const loom::Tensor c = loom::Tensor::zeros({peak_shape, peak_shape}, precision.storage, device);
    loom::kernels::GemmOptions gemm;
    gemm.precision = precision.gemm;
    const loom::Stream stream(device);
    const double gemm_flops = 2.0 * static_cast<double>(peak_shape) * peak_shape * peak_shape;
    const int timed_rounds = std::min(rounds, steps);
    for (int round = 0; round < timed_rounds; ++round) {
      const int round_steps = steps * (round + 1) / timed_rounds - steps * round / timed_rounds;
      std::vector<double> round_seconds;
      for (int i = 0; i < round_steps; ++i) round_seconds.push_back(trainer.step().seconds);
      seconds.insert(seconds.end(), round_seconds.begin(), round_seconds.end());
      const double round_peak =
          gemm_flops / loom::bench::median_seconds([&] { loom::kernels::gemm(a, b, c, gemm, stream); }, 3, stream);
      round_peaks.push_back(round_peak);
      round_mfus.push_back(model_flops / loom::bench::median(round_seconds) / round_peak);
      if (!want_peer || !peer_absent.empty()) continue;
      peer_record = loom::bench::run_torch_peer(request, peer_absent);
      if (peer_record) peer_tokens.push_back((*peer_record)["tokens_per_s"].get<double>());
    }
    loom::require(peer != "torch" || peer_absent.empty(), "train_bench: --peer torch: ", peer_absent);
    const double step_seconds = loom::bench::median(seconds);
    const double peak = loom::bench::median(round_peaks);
    const double mfu = loom::bench::median(round_mfus);
    const double achieved = model_flops / step_seconds;
    const nlohmann::json cpu = loom::bench::cpu_description();
    std::printf("%s\n", loom::to_string(loom::build_info()).c_str());
    std::printf("CPU %s, kernels %s, %d threads\n", cpu["model"].get<std::string>().c_str(),
                cpu["kernels"].get<std::string>().c_str(), omp_get_max_threads());
    if (device.is_cpu()) {
      std::printf("Caches %s\nGEMM blocking %s\n", cpu["caches"]["text"].get<std::string>().c_str(),
                  loom::bench::gemm_blocking_text(loom::kernels::active_cpu_isa()).c_str());
    }
    std::printf("GPT %lldL %lldH width %lld, seq %lld, batch %lld, vocab %lld, %s on %s, %s attention (%lld parameters)\n\n",
                static_cast<long long>(config.layers), static_cast<long long>(config.heads),
                static_cast<long long>(config.channels), static_cast<long long>(config.context),
                static_cast<long long>(batch), static_cast<long long>(config.vocab_size), precision_name.c_str(),
                device.to_string().c_str(), loom::nn::to_string(config.attention).c_str(),
                static_cast<long long>(config.parameter_count()));
    std::printf("%-28s %12s\n", "metric", "value");
    std::printf("%-28s %12.2f\n", "step ms (median)", step_seconds * 1e3);
    std::printf("%-28s %12.0f\n", "tokens/s", tokens / step_seconds);
    std::printf("%-28s %12.2f\n", "model GFLOP/s", achieved / 1e9);
    std::printf("%-28s %12.2f\n", "GEMM peak GFLOP/s (baseline)", peak / 1e9);
    std::printf("%-28s %11.1f%%  (rounds: %.1f%% to %.1f%%)\n", "MFU vs measured GEMM peak", 100.0 * mfu,
                100.0 * *std::min_element(round_mfus.begin(), round_mfus.end()),
                100.0 * *std::max_element(round_mfus.begin(), round_mfus.end()));
    const double peer_tokens_per_s = peer_tokens.empty() ? 0.0 : loom::bench::median(peer_tokens);
    if (peer_tokens_per_s > 0) {
      const std::string label = "PyTorch " + (*peer_record)["torch"].get<std::string>() + " tokens/s";
      std::printf("%-28s %12.0f\n", label.c_str(), peer_tokens_per_s);
      std::printf("%-28s %11.2fx\n", "loom vs PyTorch (same run)", tokens / step_seconds / peer_tokens_per_s);
    } else {
      std::printf("%-28s %12s\n", "PyTorch peer", ("none: " + peer_absent).c_str());
    }
    nlohmann::json record = loom::bench::make_record(
        "train_bench", {{"layers", config.layers}, {"heads", config.heads}, {"channels", config.channels},
                        {"context", config.context}, {"batch", batch}, {"vocab", config.vocab_size},
                        {"precision", precision_name}, {"attention", loom::nn::to_string(config.attention)},
                        {"device", device.to_string()}, {"steps", steps},
                        {"peak_shape", peak_shape}, {"threads", omp_get_max_threads()}, {"rounds", timed_rounds}});
    record["rows"].push_back({{"step_ms", step_seconds * 1e3}, {"tokens_per_s", tokens / step_seconds},
                              {"model_gflops", achieved / 1e9}, {"gemm_peak_gflops", peak / 1e9},
                              {"mfu", mfu}, {"mfu_rounds", round_mfus}});
    for (const double round_peak : round_peaks) record["rows"][0]["gemm_peak_gflops_rounds"].push_back(round_peak / 1e9);
    if (peer_tokens_per_s > 0) {
      record["rows"][0]["torch_tokens_per_s"] = peer_tokens_per_s;
      record["rows"][0]["vs_torch"] = tokens / step_seconds / peer_tokens_per_s;
      record["peer"] = *peer_record;
      record["peer"]["tokens_per_s_rounds"] = peer_tokens;
    } else {
      record["peer_not_measured"] = peer_absent;  // why there is no PyTorch figure
    }
    if (checkpointing_modes.size() > 1) {
      record["config"]["activation_checkpointing"] = checkpointing_modes;
      record["activation_checkpointing"] =
          compare_checkpointing(config, precision, device, batch, steps, warmup, checkpointing_modes);
    }
    if (!telemetry_modes.empty()) {
      record["config"]["telemetry"] = telemetry_modes;
      record["telemetry"] = loom::bench::compare_telemetry(config, precision, device, batch, steps, warmup, telemetry_modes);
    }
    if (!json_path.empty()) loom::bench::write_json(json_path, record);
    return 0;
  } catch (const loom::Error& error) {
    std::fprintf(stderr, "train_bench: %s\n", error.what());
    return 1;
  }
}
