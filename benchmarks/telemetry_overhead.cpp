#include "telemetry_overhead.hpp"

#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>

#include "bench_report.hpp"
#include "loom/core/error.hpp"
#include "loom/core/gpu_info.hpp"
#include "loom/telemetry/nvml.hpp"
#include "loom/train/trainer.hpp"
#include "repeat_batch.hpp"

namespace loom::bench {

nlohmann::json compare_telemetry(const nn::GPTConfig& config, const nn::Precision& precision, Device device,
                                 std::int64_t batch, int steps, int warmup, const std::vector<std::string>& modes) {
  struct Run {
    std::string mode;
    std::unique_ptr<nn::GPT> model;
    std::unique_ptr<RepeatBatch> data;
    std::unique_ptr<train::Trainer> trainer;
    std::unique_ptr<telemetry::GpuSampler> sampler;
    std::vector<double> seconds;
  };
  const auto trace_dir = std::filesystem::temp_directory_path() / "loom_train_bench_trace";
  std::filesystem::remove_all(trace_dir);
  std::mt19937 rng(1);
  const data::Batch batch_data = random_batch(batch, config.context, config.vocab_size, rng);
  std::vector<Run> runs;
  std::string nvml_note;
  for (const std::string& mode : modes) {
    require(mode == "off" || mode == "phases" || mode == "trace" || mode == "nvml", "train_bench --telemetry: unknown "
            "mode '", mode, "' (off, phases, trace, nvml)");
    train::TrainerOptions options;
    options.schedule = {.max_lr = 1e-4f, .min_lr = 1e-5f, .warmup = 0, .total = steps + warmup + 1};
    options.phase_timers = mode != "off";
    if (mode == "off") options.stragglers.every = 0;
    if (mode == "trace") options.trace = {.dir = trace_dir.string(), .first_step = warmup + 1, .last_step = warmup + steps};
    Run run;
    run.mode = mode;
    if (mode == "nvml") {
      std::shared_ptr<telemetry::Nvml> nvml = telemetry::Nvml::load(&nvml_note);
      if (!nvml) {
        std::printf("nvml: skipped (%s)\n", nvml_note.c_str());
        continue;
      }
      const unsigned index = device.is_cuda() ? nvml->index_of_bus(cuda_device_properties(device.index()).pci_bus_id) : 0;
      run.sampler = std::make_unique<telemetry::GpuSampler>(nvml, index, std::chrono::milliseconds(100));
    }
    run.model = std::make_unique<nn::GPT>(config, precision, device);
    run.data = std::make_unique<RepeatBatch>(batch_data, config.vocab_size);
    run.trainer = std::make_unique<train::Trainer>(*run.model, *run.data, options);
    for (int i = 0; i < warmup; ++i) run.trainer->step();
    runs.push_back(std::move(run));
  }
  require(!runs.empty() && runs.front().mode == "off", "train_bench --telemetry: the first mode must be off (the baseline)");
  for (int i = 0; i < steps; ++i) {
    for (Run& run : runs) run.seconds.push_back(run.trainer->step().seconds);
  }
  const double base = median(runs.front().seconds);
  std::printf("telemetry overhead: %d steps per configuration, stepped in turn; median step against off\n", steps);
  std::printf("%-8s %10s %10s %8s\n", "mode", "step ms", "overhead", "target");
  nlohmann::json rows = nlohmann::json::array();
  for (const Run& run : runs) {
    const double step = median(run.seconds);
    const char* target = run.mode == "phases" || run.mode == "nvml" ? "<= 1%" : run.mode == "trace" ? "<= 2%" : "-";
    std::printf("%-8s %10.3f %9.2f%% %8s\n", run.mode.c_str(), step * 1e3, 100 * (step / base - 1), target);
    rows.push_back({{"mode", run.mode}, {"step_ms", step * 1e3}, {"overhead", step / base - 1}, {"target", target},
                    {"steps", run.seconds}});
  }
  std::filesystem::remove_all(trace_dir);
  return {{"baseline", "off"}, {"rows", rows}, {"nvml", nvml_note.empty() ? "sampled" : nvml_note}};
}

}  // namespace loom::bench
