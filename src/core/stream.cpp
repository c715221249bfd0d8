#include "loom/core/stream.hpp"

#include <utility>

#include "cuda_runtime.hpp"
#include "loom/core/error.hpp"

namespace loom {

namespace cudart = detail::cuda_rt;

Stream::Stream(Device device) : device_(device) {
  if (device_.is_cuda()) native_ = cudart::stream_create(device_.index());
}

Stream::~Stream() {
  if (native_ != nullptr) cudart::stream_destroy(device_.index(), native_);
}

Stream::Stream(Stream&& other) noexcept
    : device_(other.device_), native_(std::exchange(other.native_, nullptr)) {}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    if (native_ != nullptr) cudart::stream_destroy(device_.index(), native_);
    device_ = other.device_;
    native_ = std::exchange(other.native_, nullptr);
  }
  return *this;
}

void synchronize(StreamRef stream) {
  if (stream.device().is_cuda()) cudart::stream_synchronize(stream.device().index(), stream.native_handle());
}

void Stream::synchronize() const {
  if (device_.is_cuda()) cudart::stream_synchronize(device_.index(), native_);
}

bool Stream::query() const {
  return device_.is_cpu() || cudart::stream_query(device_.index(), native_);
}

void Stream::wait(const Event& event) const { loom::wait(ref(), event); }

void wait(StreamRef stream, const Event& event) {
  const Device device = stream.device();
  require(event.device() == device, "stream on ", device, " cannot wait for an event on ", event.device());
  require(event.recorded(), "stream on ", device, " asked to wait for an event never recorded");
  if (device.is_cuda()) cudart::stream_wait_event(device.index(), stream.native_handle(), event.native_handle());
}

Event::Event(Device device, bool enable_timing) : device_(device), timing_(enable_timing) {
  if (device_.is_cuda()) native_ = cudart::event_create(device_.index(), enable_timing);
}

Event::~Event() {
  if (native_ != nullptr) cudart::event_destroy(device_.index(), native_);
}

Event::Event(Event&& other) noexcept
    : device_(other.device_),
      timing_(other.timing_),
      recorded_(std::exchange(other.recorded_, false)),
      native_(std::exchange(other.native_, nullptr)),
      cpu_time_(other.cpu_time_) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (native_ != nullptr) cudart::event_destroy(device_.index(), native_);
    device_ = other.device_;
    timing_ = other.timing_;
    recorded_ = std::exchange(other.recorded_, false);
    native_ = std::exchange(other.native_, nullptr);
    cpu_time_ = other.cpu_time_;
  }
  return *this;
}

void Event::record(StreamRef stream) {
  require(stream.is_default() || stream.device() == device_, "event on ", device_,
          " cannot be recorded on a stream on ", stream.device());
  if (device_.is_cuda()) {
    cudart::event_record(device_.index(), native_, stream.native_handle());
  } else {
    cpu_time_ = std::chrono::steady_clock::now();
  }
  recorded_ = true;
}

void Event::synchronize() const {
  require(recorded_, "synchronize() on an event on ", device_, " that was never recorded");
  if (device_.is_cuda()) cudart::event_synchronize(device_.index(), native_);
}

bool Event::query() const {
  require(recorded_, "query() on an event on ", device_, " that was never recorded");
  return device_.is_cpu() || cudart::event_query(device_.index(), native_);
}

float Event::elapsed_ms(const Event& end) const {
  require(device_ == end.device_, "elapsed_ms between events on ", device_, " and ", end.device_);
  require(timing_ && end.timing_, "elapsed_ms needs both events created with enable_timing");
  require(recorded_ && end.recorded_, "elapsed_ms needs both events recorded");
  if (device_.is_cuda()) return cudart::event_elapsed_ms(device_.index(), native_, end.native_);
  return std::chrono::duration<float, std::milli>(end.cpu_time_ - cpu_time_).count();
}

}  // namespace loom
