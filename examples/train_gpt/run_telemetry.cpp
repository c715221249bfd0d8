#include "run_telemetry.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "loom/core/error.hpp"
#include "loom/core/gpu_info.hpp"
#include "loom/core/visible_devices.hpp"

namespace train_gpt {

std::string for_rank(std::string path, int rank) {
  if (const auto at = path.find("{rank}"); at != std::string::npos) path.replace(at, 6, std::to_string(rank));
  return path;
}

RunTelemetry::RunTelemetry(const RunConfig& config, const loom::Device& device, int rank, int local_rank,
                           const loom::topo::Planner* planner, loom::comm::Communicator* data_group)
    : rank_(rank), planner_(planner), path_check_({}, data_group) {
  // One file per rank when the path names the rank; rank 0's alone otherwise.
  const auto mine = [&](const std::string& path) {
    return !path.empty() && (rank == 0 || path.find("{rank}") != std::string::npos) ? for_rank(path, rank) : "";
  };
  if (const std::string path = mine(config.metrics_file); !path.empty()) metrics_.emplace(path);
  prometheus_ = mine(config.prometheus_file);
  if (config.gpu_sample_ms <= 0) {
    sampling_line_ = "GPU sampling: off (--gpu-sample-ms 0)";
    return;
  }
  // A CPU run samples only an NVML named explicitly (the tests' fake); a GPU run its own device.
  if (!device.is_cuda() && std::getenv("LOOM_NVML_LIBRARY") == nullptr) {
    sampling_line_ = "GPU sampling: none (the model is on the CPU)";
    return;
  }
  if (!device.is_cuda() && loom::visible_devices_from_environment().none()) {
    sampling_line_ = "GPU sampling: none (the model is on the CPU and CUDA_VISIBLE_DEVICES allows no GPU)";
    return;
  }
  std::string why_not;
  std::shared_ptr<loom::telemetry::Nvml> nvml = loom::telemetry::Nvml::load(&why_not);
  if (!nvml) {
    sampling_line_ = "GPU sampling: " + why_not + "; training goes on without it";
    return;
  }
  // A GPU run reads the device that its CUDA device is (by UUID, nvml.hpp), never one guessed from
  // the CUDA ordinal; a CPU run reads the explicitly named library's device at the local rank.
  loom::telemetry::NvmlDevice target;
  try {
    if (device.is_cuda()) {
      const loom::CudaDeviceProperties p = loom::cuda_device_properties(device.index());
      target = nvml->resolve(p.uuid, p.pci_bus_id);
    } else {
      target.index = static_cast<unsigned>(local_rank) % std::max(1u, nvml->device_count());
    }
  } catch (const loom::Error& e) {  // NVML does not see this GPU: sampling is a nicety, training goes on
    sampling_line_ = std::string("GPU sampling: ") + e.what() + "; training goes on without it";
    return;
  }
  sampler_ = std::make_unique<loom::telemetry::GpuSampler>(nvml, target, std::chrono::milliseconds(config.gpu_sample_ms));
  sampling_line_ = "GPU sampling: " + target.describe() + " (" + nvml->name(target) + ") every " +
                   std::to_string(config.gpu_sample_ms) + " ms";
  if (target.is_mig()) sampling_line_ += ": a MIG instance, its memory only (NVML reports no utilisation, power or clocks per instance)";
}

std::vector<std::string> RunTelemetry::step(const loom::train::StepResult& result, const loom::train::Trainer& trainer,
                                            bool logged, std::optional<double> mfu, std::optional<double> hfu) {
  if (result.stragglers) window_ = result.stragglers;
  totals_.add(result.seconds, result.phases, result.memory_peak_total);
  tokens_ += result.tokens;
  seconds_ += result.seconds;
  // What the cost model predicts for the same calls, one at a time; every step, for the path check.
  loom::telemetry::CommTotals communication = result.communication;
  if (planner_ != nullptr) loom::telemetry::predict(communication, *planner_);
  std::vector<std::string> warnings;
  for (const loom::telemetry::PathFinding& f : path_check_.add(communication)) {
    warnings.push_back(loom::telemetry::describe(f));
  }
  if (!logged || (!metrics_ && prometheus_.empty())) return warnings;
  loom::telemetry::StepMetrics m = loom::train::step_metrics(result, trainer, rank_);
  m.mfu = mfu;
  m.hfu = hfu;
  m.stragglers = window_;
  m.communication = communication;
  if (sampler_) m.gpu = sampler_->latest();
  if (metrics_) metrics_->write(m);
  if (!prometheus_.empty()) loom::telemetry::write_prometheus_file(prometheus_, m);
  return warnings;
}

std::string RunTelemetry::gpu_summary() const {
  if (!sampler_) return "";
  const loom::telemetry::GpuSummary s = loom::telemetry::summarize(sampler_->samples());
  if (s.samples == 0) return "";
  char text[512];
  const loom::telemetry::NvmlDevice& target = sampler_->device();
  if (target.is_mig()) {  // memory is all NVML reports per MIG instance
    std::snprintf(text, sizeof text, "GPU (%s, %s): memory up to %.1f of %.1f GiB over %zu samples",
                  target.describe().c_str(), sampler_->nvml().name(target).c_str(),
                  static_cast<double>(s.memory_used_max) / (1 << 30), static_cast<double>(s.memory_total) / (1 << 30),
                  s.samples);
    return text;
  }
  std::snprintf(text, sizeof text,
                "GPU (NVML device %u, %s): utilisation mean %.0f%% (p95 %.0f%%), memory up to %.1f of %.1f GiB, power "
                "mean %.0f W (max %.0f W), SM clock down to %u MHz, up to %u C, %zu of %zu samples throttled",
                sampler_->index(), sampler_->nvml().name(sampler_->index()).c_str(), s.utilization_mean,
                s.utilization_p95, static_cast<double>(s.memory_used_max) / (1 << 30),
                static_cast<double>(s.memory_total) / (1 << 30), s.power_mean_watts, s.power_max_watts,
                s.sm_clock_min_mhz, s.temperature_max_c, s.throttled_samples, s.samples);
  return text;
}

}  // namespace train_gpt

namespace train_gpt {

void RunTelemetry::report(const std::string& path, const std::string& job, const loom::Device& device,
                          loom::comm::Communicator* world, std::int64_t memory_capacity_bytes,
                          const loom::plan::PlanRequest& request, std::optional<double> mfu) {
  loom::telemetry::RankSummary mine;
  mine.rank = rank_;
  mine.step_seconds = totals_.step_seconds_mean();
  mine.phases = totals_.phases_mean();
  mine.memory_peak_bytes = totals_.memory_peak_bytes();
  mine.memory_capacity_bytes = memory_capacity_bytes;
  if (sampler_) {
    const loom::telemetry::GpuSummary gpu = loom::telemetry::summarize(sampler_->samples());
    if (gpu.samples > 0) mine.gpu = gpu;
    // On a GPU the allocator's counts are the CPU's: the device's memory is NVML's most in use.
    if (gpu.samples > 0 && mine.memory_peak_bytes == 0) mine.memory_peak_bytes = static_cast<std::int64_t>(gpu.memory_used_max);
  }
  loom::telemetry::RunReport report;
  report.ranks = loom::telemetry::gather_summaries(mine, world);
  if (rank_ != 0) return;
  report.job = job;
  report.device = device.to_string();
  report.steps = totals_.steps();
  report.tokens_per_second = seconds_ > 0 ? static_cast<double>(tokens_) / seconds_ : 0;
  report.mfu = mfu;
  const int ranks = static_cast<int>(report.ranks.size());
  loom::plan::PlanRequest base = request;
  if (mfu && *mfu > 0.01) base.efficiency = std::min(*mfu, 0.9);
  report.alternatives_basis = "Predicted by loom-plan's cost model for HGX servers (8 GPUs on NVSwitch) at " +
                              loom::plan::fixed(100 * base.efficiency, 0) + "% of each GPU's dense " + base.precision +
                              " peak (" + (mfu && *mfu > 0.01 ? "the MFU measured here" : "loom-plan's default: no GPU "
                              "MFU was measured in this run") + "), with the same micro-batch and sequence length; "
                              "each row is the layout loom-plan recommends there.";
  std::vector<int> counts{std::max(1, ranks / 2), ranks, 2 * ranks};
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());  // one rank: 1 and 2 GPUs
  for (const std::string kind : {"A100", "H100", "H200"}) {
    for (const int gpus : counts) {
      loom::telemetry::Alternative a;
      a.gpus = gpus;
      try {
        base.topology = loom::plan::hgx_cluster(kind, gpus);
        const loom::plan::PlanResult result = loom::plan::plan(base);
        a.gpu = result.gpu;
        if (result.recommended) {
          const loom::plan::LayoutPlan& best = result.layouts[*result.recommended];
          a.fits = true;
          a.layout = best.name();
          a.step_seconds = best.step_seconds;
          a.tokens_per_second = best.tokens_per_second;
          a.gpu_hours_per_billion_tokens = gpus * (1e9 / best.tokens_per_second) / 3600.0;
        } else {
          a.layout = "nothing fits";
        }
      } catch (const loom::Error& e) {
        a.gpu = kind;
        a.layout = std::string("not predicted: ") + e.what();
      }
      report.alternatives.push_back(a);
    }
  }
  loom::telemetry::write_report(path, report);
}

}  // namespace train_gpt
