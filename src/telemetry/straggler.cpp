#include "loom/telemetry/straggler.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "loom/core/error.hpp"
#include "loom/comm/agreement.hpp"

namespace loom::telemetry {

namespace {

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

constexpr std::size_t fields = 1 + phase_count;  // the step, then each phase

}  // namespace

std::vector<StragglerFinding> find_stragglers(const std::vector<RankWindow>& ranks, const StragglerOptions& options) {
  std::vector<StragglerFinding> found;
  if (ranks.size() < 2) return found;
  std::vector<double> steps;
  for (const RankWindow& r : ranks) steps.push_back(r.step_seconds);
  const double step_median = median(steps);
  for (Phase phase : all_phases) {
    if (phase == Phase::communication) continue;  // the waiting ranks', not the cause (see the header)
    std::vector<double> values;
    for (const RankWindow& r : ranks) values.push_back(r.phases[phase]);
    const double m = median(values);
    for (const RankWindow& r : ranks) {
      const double excess = r.phases[phase] - m;
      if (excess > options.margin * m && excess >= options.min_share * step_median && excess > 0) {
        found.push_back({.rank = r.rank, .phase = phase, .seconds = r.phases[phase], .median_seconds = m});
      }
    }
  }
  return found;
}

std::string describe(const StragglerFinding& f) {
  char text[256];
  std::snprintf(text, sizeof text, "rank %d %s %+.0f%% over the median for %lld steps (%.4f s against %.4f s)", f.rank,
                std::string(phase_name(f.phase)).c_str(), 100 * f.excess(), static_cast<long long>(f.steps), f.seconds,
                f.median_seconds);
  return text;
}

StragglerDetector::StragglerDetector(const StragglerOptions& options, comm::Communicator* comm)
    : options_(options), comm_(comm) {
  require(options.every >= 0, "straggler detection: every ", options.every, " steps is negative (0 turns it off)");
  require(options.margin > 0, "straggler detection: the margin ", options.margin, " must be positive");
  require(options.min_share >= 0, "straggler detection: min_share ", options.min_share, " is negative");
}

std::optional<StragglerWindow> StragglerDetector::add(std::int64_t step, double step_seconds, const PhaseSeconds& phases) {
  if (options_.every == 0) return std::nullopt;
  ++steps_;
  sum_.step_seconds += step_seconds;
  for (Phase p : all_phases) sum_.phases[p] += phases[p];
  if (steps_ < options_.every) return std::nullopt;

  // One all-gather of every rank's window sums (f32: the averages need no more).
  const int ranks = comm_ != nullptr ? comm_->size() : 1;
  std::vector<float> mine(fields);
  mine[0] = static_cast<float>(sum_.step_seconds / static_cast<double>(steps_));
  for (Phase p : all_phases) mine[1 + static_cast<std::size_t>(p)] = static_cast<float>(sum_.phases[p] / static_cast<double>(steps_));
  const std::vector<float> all = comm_ != nullptr && ranks > 1 ? comm::all_gather_values(*comm_, mine) : mine;
  StragglerWindow window;
  window.last_step = step;
  window.steps = steps_;
  for (int r = 0; r < ranks; ++r) {
    RankWindow w;
    w.rank = r;
    w.step_seconds = all[static_cast<std::size_t>(r) * fields];
    for (Phase p : all_phases) w.phases[p] = all[static_cast<std::size_t>(r) * fields + 1 + static_cast<std::size_t>(p)];
    window.ranks.push_back(w);
  }
  window.findings = find_stragglers(window.ranks, options_);
  // A streak lasts while the same rank and phase are named window after window.
  std::map<std::pair<int, Phase>, std::int64_t> streak;
  for (StragglerFinding& f : window.findings) {
    const auto key = std::make_pair(f.rank, f.phase);
    f.steps = (streak_.count(key) ? streak_[key] : 0) + steps_;
    streak[key] = f.steps;
    ++named_[key];
  }
  streak_ = std::move(streak);
  window.named_windows = named_;
  steps_ = 0;
  sum_ = {};
  return window;
}

}  // namespace loom::telemetry
