// A timeline of chosen steps (`--trace DIR`, a step range): one Chrome trace-event JSON file per
// rank (DIR/trace_rank<r>.json) that Perfetto and chrome://tracing open, merged into one file with
// a track per rank by scripts/merge-traces.py. Three tracks per rank:
//   compute        the phases and every unit's forward and backward, timed on the step's stream
//                  (timing Events: device time on a GPU, read after the step's synchronization)
//   communication  each collective from its call to its completion (host clock), with its bytes
//                  (observed_communicator in comm_meter.hpp records them)
//   host           the wait for data and the checkpoint saves
// On a GPU each stream span is also an NVTX range (nsys and Nsight show them). Times are
// microseconds of the system clock, so that files from several processes line up.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "loom/comm/communicator.hpp"
#include "loom/core/stream.hpp"

namespace loom::telemetry {

struct TraceOptions {
  std::string dir;               // empty: no trace
  std::int64_t first_step = 1;   // the steps recorded, both included
  std::int64_t last_step = 10;
};

enum class TraceTrack : int { compute = 0, communication = 1, host = 2 };

class TraceRecorder {
 public:
  using Clock = std::chrono::steady_clock;
  // Creates dir (an io Error naming it when it cannot); checks the range.
  TraceRecorder(const TraceOptions& options, Device device, int rank);
  // Writes what was recorded if the range was cut short (a failed or shorter run); never throws.
  ~TraceRecorder();
  TraceRecorder(const TraceRecorder&) = delete;
  TraceRecorder& operator=(const TraceRecorder&) = delete;

  // Around each training step: begin_step records the step's reference on the stream; end_step,
  // after the stream was synchronized, turns the stream spans into times, and writes the file once
  // the last step of the range is done.
  void begin_step(std::int64_t step, StreamRef stream);
  void end_step();
  bool recording() const noexcept { return recording_.load(std::memory_order_relaxed); }
  // Whether `step` is in the range (saves between steps are recorded after the step they follow).
  bool covers(std::int64_t step) const noexcept {
    return !written_ && step >= options_.first_step && step <= options_.last_step;
  }

  // A span timed on the stream (compute track); end takes what begin returned.
  std::size_t begin(std::string name, const char* category, StreamRef stream);
  void end(std::size_t span, StreamRef stream);
  // A span timed on the host, from any thread (communication completes on progress threads).
  // `step`: the step it belongs to (the current one when -1; a collective passes the step that
  // called it, since it may complete after the next began).
  void host_span(std::string name, const char* category, TraceTrack track, Clock::time_point begin,
                 Clock::time_point end, std::int64_t bytes = -1, std::int64_t step = -1);
  std::int64_t step() const noexcept { return step_.load(std::memory_order_relaxed); }

  std::string path() const;  // DIR/trace_rank<r>.json
  void write();              // the events so far (called by end_step at the range's end)

 private:
  struct Event {
    std::string name;
    const char* category;
    int track;
    double begin_us, duration_us;
    std::int64_t bytes, step;
  };
  struct Open {
    std::string name;
    const char* category;
    std::size_t start, stop;  // indices into events_ (the timing Events)
  };
  std::size_t record(StreamRef stream);
  double micros(Clock::time_point t) const;

  TraceOptions options_;
  Device device_;
  int rank_;
  std::atomic<bool> recording_{false};  // read by the threads that make communication calls
  bool written_ = false;
  std::atomic<std::int64_t> step_{0};
  Clock::time_point anchor_{};
  double clock_offset_us_ = 0;  // system clock minus steady clock, in microseconds
  std::vector<loom::Event> events_;  // a pool of timing events; [0] is the step's reference
  std::size_t used_ = 0;
  std::vector<Open> open_;
  std::mutex mutex_;  // guards done_ (host spans come from other threads)
  std::vector<Event> done_;
};

}  // namespace loom::telemetry
