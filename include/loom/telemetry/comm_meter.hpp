// The bandwidth a step's collectives achieved: every call of the data group is timed from call to
// completion (through the Communicator seam, observed_communicator), and per collective kind the
// bus bandwidth is its bytes times nccl-tests' bus factor (all-reduce 2(n-1)/n, reduce-scatter and
// all-gather (n-1)/n of the whole buffer) over the time such calls were in flight (the union of
// their intervals, so calls queued behind each other are not counted twice). Calls under 64 KiB
// (the loss's mean, agreements) are counted but left out of the bandwidth: latency, not bandwidth.
// The caller sets `predicted_seconds` from the topology's cost model; a ratio far below 1 points at
// a wrong path (the complaint of nccl#324, #1843, #2329; PathCheck, path_check.hpp, says so).
// The time is the device's where the backend measures it (NCCL: the call's events on its stream,
// from its turn to its end; comm::Completion), else the host's, from the call to the completion
// the backend reports, which on the CPU includes the scheduling of busy cores.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>

#include "loom/comm/communicator.hpp"

namespace loom::telemetry {

class TraceRecorder;

enum class CollectiveKind : std::uint8_t { all_reduce, reduce_scatter, all_gather, other };
inline constexpr std::size_t collective_kinds = 4;
std::string_view collective_name(CollectiveKind kind);
inline constexpr std::int64_t bandwidth_min_bytes = 64 << 10;

struct CollectiveTotals {
  std::int64_t calls = 0;
  std::int64_t bytes = 0;          // of the calls of at least bandwidth_min_bytes
  std::int64_t measured_calls = 0; // those calls
  std::int64_t device_timed_calls = 0;  // of those, the ones the backend timed on the device
  double seconds = 0;              // their time: the device's, or the host's in flight (union of intervals)
  std::optional<double> predicted_seconds;  // the cost model's for the same calls, when the caller knows
};

struct CommTotals {
  int ranks = 1;
  std::array<CollectiveTotals, collective_kinds> by_kind{};
  const CollectiveTotals& operator[](CollectiveKind k) const { return by_kind[static_cast<std::size_t>(k)]; }
  CollectiveTotals& operator[](CollectiveKind k) { return by_kind[static_cast<std::size_t>(k)]; }
  // bytes x bus factor / seconds; 0 without measured calls (or one rank: nothing moves).
  double bus_bytes_per_second(CollectiveKind kind) const;
  std::optional<double> predicted_bus_bytes_per_second(CollectiveKind kind) const;
};

// Thread-safe: calls complete on the backends' progress threads.
class CommMeter {
 public:
  using Clock = std::chrono::steady_clock;
  // A completed call: its host span, and its device time where the backend measured one (then
  // that is its time).
  void add(CollectiveKind kind, std::int64_t bytes, Clock::time_point start, Clock::time_point end,
           std::optional<double> device_seconds = std::nullopt);
  // The totals since the last take, and a fresh start.
  CommTotals take(int ranks);

 private:
  std::mutex mutex_;
  CommTotals totals_;
  std::array<Clock::time_point, collective_kinds> busy_until_{};
};

// A Communicator that forwards every call to `inner` (not owned) and reports it, from the call to
// its completion, to `meter` (always, when given) and to `trace` (while it records, when given).
// Completions can come after the caller moved on (a ZeRO-3 gather the stream waited for on the
// device): they hold the two weakly, and a meter or trace gone by then is skipped.
std::unique_ptr<comm::Communicator> observed_communicator(comm::Communicator& inner,
                                                          const std::shared_ptr<TraceRecorder>& trace,
                                                          const std::shared_ptr<CommMeter>& meter);

}  // namespace loom::telemetry
