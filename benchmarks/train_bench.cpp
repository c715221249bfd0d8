// train_bench: throughput of loom's GPT training step (forward, backward, AdamW) in tokens/s and
// its model-FLOPs utilisation against the machine's GEMM peak measured in the same run (loom's
// GEMM at --peak-shape in the run's precision: the ceiling the step's GEMMs could reach here).
// Model FLOPs per token: 6 x parameters + 12 x layers x width x sequence (the llm.c/PaLM rule).
// On the CPU it also runs PyTorch's step on the same model, batch and thread count
// (benchmarks/peers/torch_gpt.py, when python3-torch is installed; --peer), in rounds alternating
// with loom's timed steps, and reports loom's tokens/s against it.
#include <CLI/CLI.hpp>
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <random>
#include <string>

#include "bench_report.hpp"
#include "repeat_batch.hpp"
#include "torch_peer.hpp"
#include "loom/kernels/cpu_isa.hpp"
#include "loom/data/addition_task.hpp"
#include "loom/kernels/gemm.hpp"
#include "loom/loom.hpp"

int main(int argc, char** argv) {
  CLI::App app("train_bench: tokens/s and MFU of loom's GPT training step");
  loom::nn::GPTConfig config;
  config.vocab_size = 256;
  config.context = 128;
  config.layers = 4;
  config.heads = 4;
  config.channels = 128;
  std::string precision_name = "fp32", device_name = "cpu", json_path, peer = "auto", attention = "auto";
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
  app.add_option("--peer", peer, "PyTorch's step on the same model in the same run: auto (on the CPU when "
                 "python3-torch is installed), torch (required) or none")->check(CLI::IsMember({"auto", "torch", "none"}));
  app.add_option("--rounds", rounds, "with a peer: rounds of loom's timed steps alternating with the peer's runs")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  try {
    const loom::Device device = loom::Device::parse(device_name);
    const loom::nn::Precision precision = loom::nn::Precision::parse(precision_name);
    config.attention = loom::nn::resolve(loom::nn::parse_attention_kernel(attention), batch, config.heads,
                                         config.context, precision.storage);
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
    std::vector<double> seconds, peer_tokens;
    std::string peer_absent = want_peer ? "" : "not asked for";
    std::optional<nlohmann::json> peer_record;
    const int timed_rounds = want_peer ? rounds : 1;
    for (int round = 0; round < timed_rounds; ++round) {
      const int round_steps = steps * (round + 1) / timed_rounds - steps * round / timed_rounds;
      for (int i = 0; i < round_steps; ++i) seconds.push_back(trainer.step().seconds);
      if (!want_peer || !peer_absent.empty()) continue;
      peer_record = loom::bench::run_torch_peer(request, peer_absent);
      if (peer_record) peer_tokens.push_back((*peer_record)["tokens_per_s"].get<double>());
    }
    loom::require(peer != "torch" || peer_absent.empty(), "train_bench: --peer torch: ", peer_absent);
    const double step_seconds = loom::bench::median(seconds);
    const double tokens = static_cast<double>(batch * config.context);
    const double model_flops = tokens * config.training_flops_per_token(config.context);

    // The GEMM ceiling: loom's GEMM at peak_shape^3 in the run's precision and storage.
    const loom::Tensor a = loom::Tensor::zeros({peak_shape, peak_shape}, precision.storage, device);
    const loom::Tensor b = loom::Tensor::zeros({peak_shape, peak_shape}, precision.storage, device);
    const loom::Tensor c = loom::Tensor::zeros({peak_shape, peak_shape}, precision.storage, device);
    loom::kernels::GemmOptions gemm;
    gemm.precision = precision.gemm;
    const loom::Stream stream(device);
    const double gemm_seconds = loom::bench::median_seconds([&] { loom::kernels::gemm(a, b, c, gemm, stream); }, 5, stream);
    const double peak = 2.0 * static_cast<double>(peak_shape) * peak_shape * peak_shape / gemm_seconds;

    const double achieved = model_flops / step_seconds;
    const nlohmann::json cpu = loom::bench::cpu_description();
    std::printf("%s\n", loom::to_string(loom::build_info()).c_str());
    std::printf("CPU %s, kernels %s, %d threads\n", cpu["model"].get<std::string>().c_str(),
                cpu["kernels"].get<std::string>().c_str(), omp_get_max_threads());
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
    std::printf("%-28s %11.1f%%\n", "MFU vs measured GEMM peak", 100.0 * achieved / peak);
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
                              {"mfu", achieved / peak}});
    if (peer_tokens_per_s > 0) {
      record["rows"][0]["torch_tokens_per_s"] = peer_tokens_per_s;
      record["rows"][0]["vs_torch"] = tokens / step_seconds / peer_tokens_per_s;
      record["peer"] = *peer_record;
      record["peer"]["tokens_per_s_rounds"] = peer_tokens;
    }
    if (!json_path.empty()) loom::bench::write_json(json_path, record);
    return 0;
  } catch (const loom::Error& error) {
    std::fprintf(stderr, "train_bench: %s\n", error.what());
    return 1;
  }
}
