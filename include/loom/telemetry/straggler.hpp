// Straggler detection, always on: every `every` steps the ranks exchange their average seconds per
// phase over those steps in one small all-gather, and a rank whose compute phase (data wait,
// forward, backward, optimizer, checkpoint) exceeds the ranks' median by more than `margin` is
// named with that phase ("rank 3 backward +38% over the median for 200 steps") and counted.
//
// Exposed communication is compared but never named: a slow rank makes the others wait, so the
// fast ranks show the long communication and the slow one the long compute phase. An excess must
// also be at least `min_share` of the median step time (5%): a phase that short holds nobody back
// for long, and short phases vary most from step to step (a data wait of 50 us against 30 us).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "loom/comm/communicator.hpp"
#include "loom/telemetry/phases.hpp"

namespace loom::telemetry {

struct StragglerOptions {
  std::int64_t every = 50;  // steps per window (and per exchange); 0 turns detection off
  double margin = 0.2;      // a phase more than this fraction over the median is slow
  double min_share = 0.05;  // ... and by at least this fraction of the median step time
};

// One rank's averages per step over a window.
struct RankWindow {
  int rank = 0;
  double step_seconds = 0;
  PhaseSeconds phases;
};

struct StragglerFinding {
  int rank = 0;
  Phase phase = Phase::backward;
  double seconds = 0;         // the rank's average per step in the window
  double median_seconds = 0;  // the ranks' median
  std::int64_t steps = 0;     // consecutive steps (whole windows) this rank and phase have been slow
  double excess() const { return median_seconds > 0 ? seconds / median_seconds - 1 : 0; }
};

// The rank and phases that are slow among `ranks` (any order), by the rules above; `steps` is left 0.
std::vector<StragglerFinding> find_stragglers(const std::vector<RankWindow>& ranks, const StragglerOptions& options);
// "rank 3 backward +38% over the median for 200 steps (0.412 s against 0.298 s)".
std::string describe(const StragglerFinding& finding);

// What one exchange found: every rank's window (in rank order) and the slow ones.
struct StragglerWindow {
  std::int64_t last_step = 0;
  std::int64_t steps = 0;  // in the window
  std::vector<RankWindow> ranks;
  std::vector<StragglerFinding> findings;
  // Windows in which each (rank, phase) was named, since the detector started.
  std::map<std::pair<int, Phase>, std::int64_t> named_windows;
};

class StragglerDetector {
 public:
  // comm: the ranks to compare (null: one process, which never exchanges). The exchange's buffers
  // live on comm's device.
  StragglerDetector(const StragglerOptions& options, comm::Communicator* comm);

  // Adds one step's times. Every `every` steps this is a collective over comm (every rank calls it
  // at the same steps) and returns the window; otherwise nothing.
  std::optional<StragglerWindow> add(std::int64_t step, double step_seconds, const PhaseSeconds& phases);

 private:
  StragglerOptions options_;
  comm::Communicator* comm_;
  std::int64_t steps_ = 0;
  RankWindow sum_;
  std::map<std::pair<int, Phase>, std::int64_t> streak_, named_;
};

}  // namespace loom::telemetry
