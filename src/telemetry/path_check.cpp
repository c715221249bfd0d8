#include "loom/telemetry/path_check.hpp"

#include <algorithm>
#include <cstdio>

#include "loom/comm/agreement.hpp"
#include "loom/core/error.hpp"

namespace loom::telemetry {

namespace {

std::optional<topo::Collective> modelled(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::all_reduce: return topo::Collective::all_reduce;
    case CollectiveKind::reduce_scatter: return topo::Collective::reduce_scatter;
    case CollectiveKind::all_gather: return topo::Collective::all_gather;
    case CollectiveKind::other: return std::nullopt;  // broadcasts, sends: no bandwidth is judged
  }
  return std::nullopt;
}

}  // namespace

void predict(CommTotals& totals, const topo::Planner& planner) {
  for (std::size_t k = 0; k < collective_kinds; ++k) {
    const auto kind = static_cast<CollectiveKind>(k);
    CollectiveTotals& t = totals[kind];
    const std::optional<topo::Collective> collective = modelled(kind);
    if (!collective || t.measured_calls == 0) continue;
    const std::int64_t per_call = t.bytes / t.measured_calls;
    t.predicted_seconds = static_cast<double>(t.measured_calls) * planner.choose(*collective, per_call).prediction.seconds;
  }
}

std::string describe(const PathFinding& f) {
  char text[640];
  std::snprintf(text, sizeof text,
                "%s achieved %.1f GB/s of bus bandwidth over %lld calls of %.1f MiB on %d ranks (the fastest rank's "
                "device time), %.2f of the %.1f GB/s the topology's cost model predicts: a likely wrong path (NCCL "
                "through host memory instead of NVLink or P2P, sockets instead of InfiniBand, a NIC far from the GPU; "
                "NCCL_DEBUG=INFO names the transport)",
                collective_name(f.kind).data(), f.achieved_bus_bytes_per_second / 1e9,
                static_cast<long long>(f.calls),
                static_cast<double>(f.bytes) / static_cast<double>(f.calls) / (1 << 20), f.ranks, f.ratio(),
                f.predicted_bus_bytes_per_second / 1e9);
  return text;
}

PathCheck::PathCheck(PathCheckOptions options, comm::Communicator* group) : options_(options), group_(group) {
  require(options.warmup_steps >= 0 && options.window_steps > 0 && options.threshold > 0,
          "PathCheck: warmup_steps must be >= 0, window_steps > 0 and threshold > 0, not ", options.warmup_steps,
          ", ", options.window_steps, " and ", options.threshold);
}

std::vector<PathFinding> PathCheck::add(const CommTotals& step) {
  std::vector<PathFinding> findings;
  if (++steps_ <= options_.warmup_steps) return findings;
  window_.ranks = step.ranks;
  for (std::size_t k = 0; k < collective_kinds; ++k) {
    const CollectiveTotals& s = step.by_kind[k];
    CollectiveTotals& w = window_.by_kind[k];
    w.calls += s.calls;
    w.bytes += s.bytes;
    w.measured_calls += s.measured_calls;
    w.device_timed_calls += s.device_timed_calls;
    w.seconds += s.seconds;
    if (s.measured_calls > 0) {
      if (s.predicted_seconds) {
        w.predicted_seconds = w.predicted_seconds.value_or(0) + *s.predicted_seconds;
      } else {
        unpredicted_[k] = true;  // the window's prediction would not cover all its calls
      }
    }
  }
  if ((steps_ - options_.warmup_steps) % options_.window_steps != 0) return findings;
  // Per kind: whether this rank can judge it, and its seconds; then every rank's, the fastest.
  std::vector<float> mine;
  for (std::size_t k = 0; k < collective_kinds; ++k) {
    const auto kind = static_cast<CollectiveKind>(k);
    const CollectiveTotals& w = window_[kind];
    const bool judged = !unpredicted_[k] && w.measured_calls > 0 && w.device_timed_calls == w.measured_calls &&
                        window_.predicted_bus_bytes_per_second(kind).has_value();
    mine.push_back(judged ? 1.0f : 0.0f);
    mine.push_back(static_cast<float>(w.seconds));
  }
  const std::vector<float> all =
      group_ != nullptr && group_->size() > 1 ? comm::all_gather_values(*group_, mine) : mine;
  const std::size_t ranks = all.size() / mine.size();
  for (std::size_t k = 0; k < collective_kinds; ++k) {
    const auto kind = static_cast<CollectiveKind>(k);
    CollectiveTotals& w = window_[kind];
    bool judged = !reported_[k];
    for (std::size_t r = 0; r < ranks; ++r) {
      judged = judged && all[r * mine.size() + 2 * k] == 1.0f;
      w.seconds = std::min(w.seconds, static_cast<double>(all[r * mine.size() + 2 * k + 1]));
    }
    const std::optional<double> predicted = window_.predicted_bus_bytes_per_second(kind);
    if (!judged || !predicted) continue;
    const double achieved = window_.bus_bytes_per_second(kind);
    if (achieved >= options_.threshold * *predicted) continue;
    reported_[k] = true;
    findings.push_back({kind, window_.ranks, w.measured_calls, w.bytes, achieved, *predicted});
  }
  window_ = {};
  unpredicted_ = {};
  return findings;
}

}  // namespace loom::telemetry
