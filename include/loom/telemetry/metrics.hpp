// A training step's numbers in the formats monitoring reads: one JSON object per logged step
// (`--metrics FILE`, JSON lines) and Prometheus' text exposition format, rewritten atomically for
// node_exporter's textfile collector (`--prometheus FILE`). Names and units follow Prometheus'
// conventions: base units (seconds, bytes), `_total` for counters, the rank and the phase or
// memory category as labels (loom_phase_seconds{rank="0",phase="backward"}).
#pragma once

#include <cstdint>
#include <fstream>
#include <optional>
#include <string>

#include "loom/core/memory_category.hpp"
#include "loom/telemetry/comm_meter.hpp"
#include "loom/telemetry/nvml.hpp"
#include "loom/telemetry/phases.hpp"
#include "loom/telemetry/straggler.hpp"

namespace loom::telemetry {

struct StepMetrics {
  std::int64_t step = 0;
  int rank = 0;
  double loss = 0, lr = 0, grad_norm = 0;
  bool skipped = false;
  std::int64_t skipped_total = 0;  // steps skipped so far in the run
  double loss_scale = 1;           // the dynamic loss scale after the step (1 without fp16 scaling)
  double seconds = 0;              // the step's wall time
  double tokens_per_second = 0;    // the job's (every rank's tokens)
  std::optional<double> mfu;       // model FLOPs over the GPU's dense peak; none without a known peak
  std::optional<double> hfu;       // the same with checkpointing's recomputed FLOPs (hardware FLOPs)
  PhaseSeconds phases;
  std::optional<CategoryBytes> memory_live, memory_peak;  // where the allocator counts them
  std::int64_t memory_peak_total = 0;
  // The last straggler window: every rank's averages (the per-rank extremes), the ranks named,
  // and how often each rank and phase has been named (in Prometheus from rank 0 alone: every rank's
  // window is the same, and one series per rank must come from one file).
  std::optional<StragglerWindow> stragglers;
  std::optional<GpuSample> gpu;  // this rank's GPU's latest NVML reading
  CommTotals communication;      // the step's collectives, achieved and predicted bandwidth
};

// One line of JSON (no newline): every field above, phases and memory as objects keyed by name.
std::string json_line(const StepMetrics& m);
// The text exposition format (HELP and TYPE lines, one sample per line, ending in a newline).
std::string prometheus_text(const StepMetrics& m);

// Appends one JSON line per step to a file, flushed at once so a crash loses no logged step.
class MetricsFile {
 public:
  // Creates or truncates path; an io Error naming it when it cannot be opened.
  explicit MetricsFile(const std::string& path);
  void write(const StepMetrics& m);

 private:
  std::string path_;
  std::ofstream out_;
};

// Replaces path with the step's Prometheus text (a temporary file, fsync, rename: a reader sees the
// previous step or this one, never a mix).
void write_prometheus_file(const std::string& path, const StepMetrics& m);

}  // namespace loom::telemetry
