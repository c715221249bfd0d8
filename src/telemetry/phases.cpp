#include "loom/telemetry/phases.hpp"

#include <exception>

#include "loom/core/error.hpp"
#include "loom/telemetry/trace.hpp"

namespace loom::telemetry {

std::string_view phase_name(Phase phase) {
  switch (phase) {
    case Phase::data: return "data";
    case Phase::forward: return "forward";
    case Phase::backward: return "backward";
    case Phase::communication: return "communication";
    case Phase::optimizer: return "optimizer";
    case Phase::checkpoint: return "checkpoint";
  }
  return "unknown";
}

double PhaseSeconds::total() const {
  double sum = 0;
  for (double s : seconds) sum += s;
  return sum;
}

PhaseTimer::PhaseTimer(Device device) : device_(device) {}

void PhaseTimer::start_step() {
  used_ = 0;
  intervals_.clear();
  open_.fill(0);
  trace_open_.fill(0);
  host_ = {};
}

std::size_t PhaseTimer::next_event(StreamRef stream) {
  if (used_ == events_.size()) events_.emplace_back(device_, /*enable_timing=*/true);
  events_[used_].record(stream);
  return used_++;
}

void PhaseTimer::begin(Phase phase, StreamRef stream) {
  if (!enabled_) return;
  std::size_t& open = open_[static_cast<std::size_t>(phase)];
  require(open == 0, "PhaseTimer: phase ", phase_name(phase), " begins while its previous interval is open");
  intervals_.push_back({phase, next_event(stream), 0});
  open = intervals_.size();
  if (trace_ != nullptr && trace_->recording()) {
    trace_open_[static_cast<std::size_t>(phase)] = 1 + trace_->begin(std::string(phase_name(phase)), "phase", stream);
  }
}

void PhaseTimer::end(Phase phase, StreamRef stream) {
  if (!enabled_) return;
  std::size_t& open = open_[static_cast<std::size_t>(phase)];
  require(open != 0, "PhaseTimer: phase ", phase_name(phase), " ends without having begun");
  intervals_[open - 1].stop = next_event(stream);
  open = 0;
  if (std::size_t& span = trace_open_[static_cast<std::size_t>(phase)]; span != 0) {
    trace_->end(span - 1, stream);
    span = 0;
  }
}

void PhaseTimer::add_host_seconds(Phase phase, double seconds) {
  if (enabled_) host_[phase] += seconds;
}

PhaseSeconds PhaseTimer::read() const {
  PhaseSeconds out = host_;
  for (const Interval& interval : intervals_) {
    require(interval.stop > interval.start, "PhaseTimer: phase ", phase_name(interval.phase), " was read while open");
    // The step's work is done, but on the device's default stream (the default StreamRef, whose
    // synchronize() is a no-op) the events recorded after its last kernel may still be pending:
    // waiting for them is waiting for nothing but the events themselves (the H200 run's
    // cudaErrorNotReady). On the CPU this does nothing.
    events_[interval.start].synchronize();
    events_[interval.stop].synchronize();
    out[interval.phase] += static_cast<double>(events_[interval.start].elapsed_ms(events_[interval.stop])) * 1e-3;
  }
  return out;
}

// On unwinding the interval stays open (the failed step's times are never read). Recording the end
// can fail only with a device error, which the step's next CUDA call reports: a destructor must not.
PhaseScope::~PhaseScope() {
  if (std::uncaught_exceptions() > exceptions_) return;
  try {
    timer_.end(phase_, stream_);
  } catch (...) {
  }
}

}  // namespace loom::telemetry
