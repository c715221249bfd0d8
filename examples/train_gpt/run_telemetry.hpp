// train_gpt's telemetry files and GPU sampling: --metrics and --prometheus written at every logged
// step (by rank 0, or by every rank when the path holds "{rank}"), the latest straggler window
// kept for them, and NVML sampling (--gpu-sample-ms) of this rank's GPU (found by its UUID, a MIG
// instance's memory only: telemetry/nvml.hpp), or of the NVML device LOOM_NVML_LIBRARY's library
// offers at the local rank when the run is on the CPU (the tests' fake NVML).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loom/core/device.hpp"
#include "loom/telemetry/metrics.hpp"
#include "loom/plan/plan.hpp"
#include "loom/topo/planner.hpp"
#include "loom/telemetry/nvml.hpp"
#include "loom/telemetry/path_check.hpp"
#include "loom/telemetry/report.hpp"
#include "loom/train/trainer.hpp"
#include "run_config.hpp"

namespace train_gpt {

class RunTelemetry {
 public:
  // Opens the metrics file (an io Error naming it when it cannot) and starts GPU sampling where
  // there is something to sample; `line` says what sampling does, or why it does not.
  // planner: the data group's cost model (null: one process), for the collectives' predicted time;
  // data_group: the ranks whose collectives are measured, for the path check (null: one process).
  RunTelemetry(const RunConfig& config, const loom::Device& device, int rank, int local_rank,
               const loom::topo::Planner* planner, loom::comm::Communicator* data_group);

  // After every step: keeps the straggler window and the run's totals, and checks the achieved
  // bandwidth against the cost model's (path_check.hpp); at a logged step, writes the files, with
  // the prediction beside the step's communication. Returns the warnings to print (a likely wrong
  // path, once per collective kind; the same on every rank of the data group). Every rank of the
  // data group must call it after every step.
  std::vector<std::string> step(const loom::train::StepResult& result, const loom::train::Trainer& trainer, bool logged,
            std::optional<double> mfu, std::optional<double> hfu);
  const std::string& sampling_line() const { return sampling_line_; }
  // "GPU (NVML device 0, NAME): utilisation mean 62% (p95 90%), ..." or empty without samples.
  std::string gpu_summary() const;
  const loom::telemetry::GpuSampler* sampler() const { return sampler_.get(); }
  double run_tokens_per_second() const { return seconds_ > 0 ? static_cast<double>(tokens_) / seconds_ : 0; }

  // The right-sizing report (--report FILE): every rank's summary (a collective over world), and
  // loom-plan's predictions for this job on 1/2, 1 and 2 times the GPUs, on A100, H100 and H200, at
  // the MFU measured here on a GPU (0.45 on the CPU). Rank 0 writes it; every rank must call.
  void report(const std::string& path, const std::string& job, const loom::Device& device,
              loom::comm::Communicator* world, std::int64_t memory_capacity_bytes,
              const loom::plan::PlanRequest& request, std::optional<double> mfu);

 private:
  std::string prometheus_;
  int rank_;
  const loom::topo::Planner* planner_;
  std::optional<loom::telemetry::MetricsFile> metrics_;
  std::optional<loom::telemetry::StragglerWindow> window_;
  loom::telemetry::RunTotals totals_;
  loom::telemetry::PathCheck path_check_;
  std::int64_t tokens_ = 0;
  double seconds_ = 0;
  std::unique_ptr<loom::telemetry::GpuSampler> sampler_;
  std::string sampling_line_;
};

// path with "{rank}" replaced by the rank.
std::string for_rank(std::string path, int rank);

}  // namespace train_gpt
