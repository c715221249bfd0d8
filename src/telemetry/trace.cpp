#include "loom/telemetry/trace.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "loom/config.hpp"
#include "loom/core/error.hpp"
#include "loom/io/files.hpp"

#if LOOM_WITH_CUDA && __has_include(<nvtx3/nvToolsExt.h>)
#include <nvtx3/nvToolsExt.h>
#define LOOM_NVTX 1
#else
#define LOOM_NVTX 0
#endif

namespace loom::telemetry {

namespace {

const char* track_name(int track) {
  switch (static_cast<TraceTrack>(track)) {
    case TraceTrack::compute: return "compute";
    case TraceTrack::communication: return "communication";
    case TraceTrack::host: return "host";
  }
  return "other";
}

}  // namespace

TraceRecorder::TraceRecorder(const TraceOptions& options, Device device, int rank)
    : options_(options), device_(device), rank_(rank) {
  require(!options.dir.empty(), "trace: no directory given");
  require(options.first_step >= 1 && options.last_step >= options.first_step, "trace: the step range ",
          options.first_step, "-", options.last_step, " is empty or starts before step 1");
  io::create_private_directories(options.dir);
  // One reading of both clocks: steady spans become system-clock times that other processes share.
  const auto system = std::chrono::system_clock::now();
  const auto steady = Clock::now();
  clock_offset_us_ = std::chrono::duration<double, std::micro>(system.time_since_epoch()).count() -
                     std::chrono::duration<double, std::micro>(steady.time_since_epoch()).count();
}

TraceRecorder::~TraceRecorder() {
  try {
    if (!written_ && !done_.empty()) write();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loom: writing the trace '%s' failed: %s\n", path().c_str(), e.what());
  }
}

std::string TraceRecorder::path() const {
  return (std::filesystem::path(options_.dir) / ("trace_rank" + std::to_string(rank_) + ".json")).string();
}

double TraceRecorder::micros(Clock::time_point t) const {
  return std::chrono::duration<double, std::micro>(t.time_since_epoch()).count() + clock_offset_us_;
}

std::size_t TraceRecorder::record(StreamRef stream) {
  if (used_ == events_.size()) events_.emplace_back(device_, /*enable_timing=*/true);
  events_[used_].record(stream);
  return used_++;
}

void TraceRecorder::begin_step(std::int64_t step, StreamRef stream) {
  step_ = step;
  recording_ = !written_ && step >= options_.first_step && step <= options_.last_step;
  if (!recording_) return;
  used_ = 0;
  open_.clear();
  // The reference: the stream is idle here (the previous step ended synchronized), so it passes as
  // it is recorded; its host time is taken as the middle of the two clock readings around it.
  const Clock::time_point before = Clock::now();
  record(stream);
  anchor_ = before + (Clock::now() - before) / 2;
}

std::size_t TraceRecorder::begin(std::string name, const char* category, StreamRef stream) {
#if LOOM_NVTX
  if (device_.is_cuda()) nvtxRangePushA(name.c_str());
#endif
  open_.push_back({std::move(name), category, record(stream), 0});
  return open_.size() - 1;
}

void TraceRecorder::end(std::size_t span, StreamRef stream) {
  require(span < open_.size() && open_[span].stop == 0, "trace: span ", span, " ended twice or never begun");
  open_[span].stop = record(stream);
#if LOOM_NVTX
  if (device_.is_cuda()) nvtxRangePop();
#endif
}

void TraceRecorder::host_span(std::string name, const char* category, TraceTrack track, Clock::time_point begin,
                              Clock::time_point end, std::int64_t bytes, std::int64_t step) {
  const std::lock_guard lock(mutex_);
  done_.push_back({std::move(name), category, static_cast<int>(track), micros(begin),
                   std::chrono::duration<double, std::micro>(end - begin).count(), bytes, step >= 0 ? step : step_.load()});
}

void TraceRecorder::end_step() {
  if (!recording_) return;
  recording_ = false;
  const double anchor = micros(anchor_);
  events_[0].synchronize();
  {
    const std::lock_guard lock(mutex_);
    for (const Open& span : open_) {
      if (span.stop == 0) continue;  // unwound by an exception: no end
      events_[span.start].synchronize();  // pending events on a default stream (see PhaseTimer::read)
      events_[span.stop].synchronize();
      const double begin = anchor + 1e3 * static_cast<double>(events_[0].elapsed_ms(events_[span.start]));
      const double duration = 1e3 * static_cast<double>(events_[span.start].elapsed_ms(events_[span.stop]));
      done_.push_back({span.name, span.category, static_cast<int>(TraceTrack::compute), begin, duration, -1, step_.load()});
    }
  }
  if (step_ >= options_.last_step) write();
}

void TraceRecorder::write() {
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", rank_}, {"args", {{"name", "rank " + std::to_string(rank_)}}}});
  for (int track = 0; track < 3; ++track) {
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", rank_}, {"tid", track},
                      {"args", {{"name", track_name(track)}}}});
  }
  {
    const std::lock_guard lock(mutex_);
    for (const Event& e : done_) {
      nlohmann::json args = {{"step", e.step}};
      if (e.bytes >= 0) args["bytes"] = e.bytes;
      events.push_back({{"name", e.name}, {"cat", e.category}, {"ph", "X"}, {"pid", rank_}, {"tid", e.track},
                        {"ts", e.begin_us}, {"dur", e.duration_us}, {"args", args}});
    }
  }
  const nlohmann::json file = {{"traceEvents", events},
                               {"displayTimeUnit", "ms"},
                               {"otherData", {{"rank", rank_}, {"device", device_.to_string()},
                                              {"first_step", options_.first_step}, {"last_step", options_.last_step}}}};
  io::write_file_atomically(path(), file.dump());
  written_ = true;
}

}  // namespace loom::telemetry
