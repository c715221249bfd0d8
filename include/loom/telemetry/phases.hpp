// Where a training step's time goes, on every rank, always on. A step is split into phases: the
// wait for data, forward, backward, exposed communication (the part of the gradient reduction and
// the step's agreements not hidden behind backward), the optimizer, and checkpointing (a save's
// blocking time, counted in the step after it). PhaseTimer measures them with timing Events on the
// step's stream (CUDA events on a GPU, host clocks on the CPU: loom/core/stream.hpp) and reads them
// after the step's own final synchronization, so it adds no synchronization to the step; the wait
// for data is host time (the data comes from the host) on both.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string_view>
#include <vector>

#include "loom/core/stream.hpp"

namespace loom::telemetry {

class TraceRecorder;

enum class Phase : std::uint8_t { data, forward, backward, communication, optimizer, checkpoint };
inline constexpr std::size_t phase_count = 6;
inline constexpr std::array<Phase, phase_count> all_phases{Phase::data,          Phase::forward,
                                                           Phase::backward,      Phase::communication,
                                                           Phase::optimizer,     Phase::checkpoint};

// "data", "forward", "backward", "communication", "optimizer", "checkpoint".
std::string_view phase_name(Phase phase);

// Seconds per phase, indexed by the phase's value.
struct PhaseSeconds {
  std::array<double, phase_count> seconds{};
  double& operator[](Phase p) { return seconds[static_cast<std::size_t>(p)]; }
  double operator[](Phase p) const { return seconds[static_cast<std::size_t>(p)]; }
  double total() const;
};

// One step's phase intervals. begin()/end() pairs on the step's stream may repeat (one per
// micro-batch); each interval's events come from a pool kept across steps, so a step allocates
// nothing after the first. Not thread-safe: the training thread owns it.
class PhaseTimer {
 public:
  explicit PhaseTimer(Device device);

  // Forgets the previous step's intervals (keeps their events for reuse).
  void start_step();
  void begin(Phase phase, StreamRef stream);
  void end(Phase phase, StreamRef stream);  // closes the phase's open interval; an Error without one
  // Host time measured by the caller (the wait for data, a checkpoint's blocking time).
  void add_host_seconds(Phase phase, double seconds);
  // The step's seconds per phase. Every interval must be closed, after the step's work is done: the
  // events are waited for, which costs nothing but the events themselves (on a GPU's default stream
  // they can still be pending after the last kernel).
  PhaseSeconds read() const;
  // Off, begin/end/add do nothing and read() gives zeros (train_bench measures the timers' cost).
  void set_enabled(bool enabled) noexcept { enabled_ = enabled; }
  // Also opens and closes a span named after the phase in `trace` while it records (null: none).
  void mirror_to(TraceRecorder* trace) noexcept { trace_ = trace; }

 private:
  struct Interval {
    Phase phase;
    std::size_t start, stop;  // indices into events_
  };
  std::size_t next_event(StreamRef stream);

  Device device_;
  std::vector<Event> events_;  // the pool; the first `used_` were recorded this step
  std::size_t used_ = 0;
  std::vector<Interval> intervals_;
  std::array<std::size_t, phase_count> open_{};  // 1 + the open interval's index; 0 when none
  PhaseSeconds host_{};
  TraceRecorder* trace_ = nullptr;
  bool enabled_ = true;
  std::array<std::size_t, phase_count> trace_open_{};  // 1 + the open trace span; 0 when none
};

// Measures a phase for the lifetime of the scope (begin at construction, end at destruction).
// When an exception unwinds through it the interval stays open, which is harmless: the failed
// step's times are never read.
class PhaseScope {
 public:
  PhaseScope(PhaseTimer& timer, Phase phase, StreamRef stream)
      : timer_(timer), phase_(phase), stream_(stream), exceptions_(std::uncaught_exceptions()) {
    timer_.begin(phase_, stream_);
  }
  ~PhaseScope();
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  PhaseTimer& timer_;
  Phase phase_;
  StreamRef stream_;
  int exceptions_;  // unwinding began since construction when there are more now
};

}  // namespace loom::telemetry
