// Streams and events, one API for both devices. On a CUDA device they wrap cudaStream_t and
// cudaEvent_t (owned, RAII). On the CPU, work submitted "on a stream" runs immediately on the
// calling thread, so a CPU stream is always idle and a CPU event records the time it was
// recorded at: code that times or orders work with streams runs unchanged on both.
#pragma once

#include <chrono>

#include "loom/core/device.hpp"

namespace loom {

class Event;

// A non-owning reference to a stream: what APIs that enqueue work take. The default-constructed
// StreamRef means "the device's default stream, and finish before returning".
class StreamRef {
 public:
  constexpr StreamRef() noexcept = default;
  constexpr StreamRef(Device device, void* native) noexcept : device_(device), native_(native) {}

  Device device() const noexcept { return device_; }
  void* native_handle() const noexcept { return native_; }  // cudaStream_t; nullptr on the CPU
  // The default-constructed StreamRef (not a device's null stream named explicitly).
  bool is_default() const noexcept { return device_.is_cpu() && native_ == nullptr; }

  friend bool operator==(const StreamRef&, const StreamRef&) noexcept = default;

 private:
  Device device_{};
  void* native_ = nullptr;
};

// Blocks until the work enqueued on stream is done (work on the default StreamRef already is).
void synchronize(StreamRef stream);
// Later work on stream waits for event (recorded, on stream's device) on the device, not the
// host; nothing to do on the CPU, where the event's work is done.
void wait(StreamRef stream, const Event& event);

class Stream {
 public:
  // A new stream on device: a non-blocking CUDA stream, or the CPU's immediate stream.
  explicit Stream(Device device = Device::cpu());
  ~Stream();
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  Device device() const noexcept { return device_; }
  void* native_handle() const noexcept { return native_; }
  StreamRef ref() const noexcept { return StreamRef(device_, native_); }
  operator StreamRef() const noexcept { return ref(); }

  void synchronize() const;          // blocks until all work on the stream is done
  bool query() const;                // true when all work on the stream is done
  void wait(const Event& event) const;  // later work on this stream waits for event

 private:
  Device device_;
  void* native_ = nullptr;
};

class Event {
 public:
  explicit Event(Device device = Device::cpu(), bool enable_timing = false);
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  Device device() const noexcept { return device_; }
  void* native_handle() const noexcept { return native_; }  // cudaEvent_t; nullptr on the CPU
  bool recorded() const noexcept { return recorded_; }

  // Records on stream, which must be on the event's device; the default StreamRef means the
  // device's default stream.
  void record(StreamRef stream);
  void synchronize() const;
  bool query() const;
  // Milliseconds from this event to end; both recorded, both created with enable_timing.
  float elapsed_ms(const Event& end) const;

 private:
  Device device_;
  bool timing_ = false;
  bool recorded_ = false;
  void* native_ = nullptr;
  std::chrono::steady_clock::time_point cpu_time_{};
};

}  // namespace loom
