// train_bench: throughput of loom's GPT training step (forward, backward, AdamW) in tokens/s and
// its model-FLOPs utilisation against the machine's GEMM peak measured in the same run (loom's
// GEMM at --peak-shape in the run's precision: the ceiling the step's GEMMs could reach here).
// Model FLOPs per token: 6 x parameters + 12 x layers x width x sequence (the llm.c/PaLM rule).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <random>
#include <string>

#include "bench_report.hpp"
#include "repeat_batch.hpp"
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
  std::string precision_name = "fp32", device_name = "cpu", json_path;
  std::int64_t batch = 8, peak_shape = 1024;
  int steps = 20, warmup = 3;
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
  CLI11_PARSE(app, argc, argv);

  try {
    const loom::Device device = loom::Device::parse(device_name);
    const loom::nn::Precision precision = loom::nn::Precision::parse(precision_name);
    std::mt19937 rng(1);
    loom::nn::GPT model(config, precision, device);
    loom::bench::RepeatBatch data(loom::bench::random_batch(batch, config.context, config.vocab_size, rng), config.vocab_size);
    loom::train::TrainerOptions options;
    options.schedule = {.max_lr = 1e-4f, .min_lr = 1e-5f, .warmup = 0, .total = steps + warmup};
    loom::train::Trainer trainer(model, data, options);
    for (int i = 0; i < warmup; ++i) trainer.step();
    std::vector<double> seconds;
    for (int i = 0; i < steps; ++i) seconds.push_back(trainer.step().seconds);
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
    std::printf("%s\n", loom::to_string(loom::build_info()).c_str());
    std::printf("GPT %lldL %lldH width %lld, seq %lld, batch %lld, vocab %lld, %s on %s (%lld parameters)\n\n",
                static_cast<long long>(config.layers), static_cast<long long>(config.heads),
                static_cast<long long>(config.channels), static_cast<long long>(config.context),
                static_cast<long long>(batch), static_cast<long long>(config.vocab_size), precision_name.c_str(),
                device.to_string().c_str(), static_cast<long long>(config.parameter_count()));
    std::printf("%-28s %12s\n", "metric", "value");
    std::printf("%-28s %12.2f\n", "step ms (median)", step_seconds * 1e3);
    std::printf("%-28s %12.0f\n", "tokens/s", tokens / step_seconds);
    std::printf("%-28s %12.2f\n", "model GFLOP/s", achieved / 1e9);
    std::printf("%-28s %12.2f\n", "GEMM peak GFLOP/s (baseline)", peak / 1e9);
    std::printf("%-28s %11.1f%%\n", "MFU vs measured GEMM peak", 100.0 * achieved / peak);
    nlohmann::json record = loom::bench::make_record(
        "train_bench", {{"layers", config.layers}, {"heads", config.heads}, {"channels", config.channels},
                        {"context", config.context}, {"batch", batch}, {"vocab", config.vocab_size},
                        {"precision", precision_name}, {"device", device.to_string()}, {"steps", steps},
                        {"peak_shape", peak_shape}});
    record["rows"].push_back({{"step_ms", step_seconds * 1e3}, {"tokens_per_s", tokens / step_seconds},
                              {"model_gflops", achieved / 1e9}, {"gemm_peak_gflops", peak / 1e9},
                              {"mfu", achieved / peak}});
    if (!json_path.empty()) loom::bench::write_json(json_path, record);
    return 0;
  } catch (const loom::Error& error) {
    std::fprintf(stderr, "train_bench: %s\n", error.what());
    return 1;
  }
}
