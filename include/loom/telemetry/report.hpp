// The right-sizing report at the end of a run (`--report FILE`: FILE in markdown, FILE.json the
// same as JSON): per rank the mean step and phases, the memory peak against what the rank could
// use, and the GPU's utilisation (mean and p95) where NVML sampled it; for the job the
// communication share of the step, the slowest rank, and what loom-plan predicts for the same job
// on fewer or more GPUs or other GPU types (filled in by the caller, who knows the model).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "loom/comm/communicator.hpp"
#include "loom/telemetry/nvml.hpp"
#include "loom/telemetry/phases.hpp"

namespace loom::telemetry {

// One rank's run, as it accumulates step by step.
class RunTotals {
 public:
  void add(double step_seconds, const PhaseSeconds& phases, std::int64_t memory_peak_bytes);
  std::int64_t steps() const { return steps_; }
  double step_seconds_mean() const { return steps_ > 0 ? seconds_ / static_cast<double>(steps_) : 0; }
  PhaseSeconds phases_mean() const;
  std::int64_t memory_peak_bytes() const { return memory_peak_; }

 private:
  std::int64_t steps_ = 0, memory_peak_ = 0;
  double seconds_ = 0;
  PhaseSeconds phases_;
};

struct RankSummary {
  int rank = 0;
  double step_seconds = 0;  // mean
  PhaseSeconds phases;      // means
  std::int64_t memory_peak_bytes = 0, memory_capacity_bytes = 0;  // 0: not known
  std::optional<GpuSummary> gpu;
};

// Every rank's summary on every rank: one all-gather over comm (null: this rank alone).
std::vector<RankSummary> gather_summaries(const RankSummary& mine, comm::Communicator* comm);

// A prediction for the same job elsewhere.
struct Alternative {
  std::string gpu;  // the GPU's name
  int gpus = 0;
  std::string layout;  // the recommended layout, or why nothing fits
  bool fits = false;
  double step_seconds = 0, tokens_per_second = 0;
  double gpu_hours_per_billion_tokens = 0;
};

struct RunReport {
  std::string job;  // what ran: model, precision, batch, layout
  std::string device;
  std::int64_t steps = 0;
  double tokens_per_second = 0;
  std::optional<double> mfu;
  std::vector<RankSummary> ranks;
  std::vector<Alternative> alternatives;
  std::string alternatives_basis;  // what the predictions assume (efficiency, topology)

  double communication_share() const;  // the ranks' mean exposed communication over their mean step
  int slowest_rank() const;            // the largest mean compute (step less exposed communication)
};

std::string report_markdown(const RunReport& report);
std::string report_json(const RunReport& report);
// FILE gets the markdown, FILE.json the JSON (each replaced atomically).
void write_report(const std::string& path, const RunReport& report);

}  // namespace loom::telemetry
