#include "loom/core/device_stager.hpp"

#include "loom/core/allocator.hpp"
#include "loom/core/error.hpp"
#include "loom/core/tensor_ops.hpp"

namespace loom {

DeviceStager::DeviceStager(Device device, int slots) : device_(device), side_(device) {
  require(slots >= 2, "DeviceStager: slots must be at least 2, got ", slots);
  slots_.reserve(static_cast<std::size_t>(slots));
  for (int i = 0; i < slots; ++i) slots_.emplace_back(device);
}

DeviceStager::~DeviceStager() {
  // No event is recorded here: the caller's stream may be gone. Its last batch's readers are the
  // caller's to finish (header).
  try {
    for (Slot& slot : slots_) {
      if (slot.released.recorded()) slot.released.synchronize();
    }
    side_.synchronize();
  } catch (...) {  // a device that failed: nothing left to wait for
  }
}

std::vector<Tensor> DeviceStager::stage(const std::vector<Tensor>& host, StreamRef stream) {
  // The default StreamRef of a GPU is its legacy default stream (CUDA's null stream).
  const StreamRef consumer = stream.is_default() && device_.is_cuda() ? StreamRef(device_, nullptr) : stream;
  require(consumer.device() == device_, "DeviceStager on ", device_, ": the stream is on ", consumer.device());
  // Everything that reads the previous batch is enqueued by now: mark where it ends.
  if (previous_ >= 0) {
    Slot& previous = slots_[static_cast<std::size_t>(previous_)];
    previous.released.record(previous.used_on);
  }
  for (std::size_t i = 0; i < host.size(); ++i) {
    require(host[i].defined() && host[i].device().is_cpu(), "DeviceStager: tensor ", i, " is not a host tensor: ",
            host[i]);
  }
  Slot& slot = slots_[static_cast<std::size_t>(next_)];
  // The page-locked buffers are free once their last copy is done: at most a copy's wait.
  if (slot.copied.recorded()) slot.copied.synchronize();
  const bool reshaped = slot.pinned.size() != host.size() || [&] {
    for (std::size_t i = 0; i < host.size(); ++i) {
      if (slot.pinned[i].shape() != host[i].shape() || slot.pinned[i].dtype() != host[i].dtype()) return true;
    }
    return false;
  }();
  if (reshaped) {  // (rare: a new batch shape) the old device buffers may still be read
    if (slot.released.recorded()) slot.released.synchronize();
    slot.pinned.clear();
    slot.on_device.clear();
    for (const Tensor& t : host) {
      slot.pinned.push_back(device_.is_cuda() ? Tensor::empty(t.shape(), t.dtype(), pinned_host_allocator(device_.index()))
                                              : Tensor::empty(t.shape(), t.dtype()));
      slot.on_device.push_back(Tensor::empty(t.shape(), t.dtype(), device_));
    }
  }
  for (std::size_t i = 0; i < host.size(); ++i) copy(slot.pinned[i], host[i]);
  if (slot.released.recorded()) side_.wait(slot.released);
  for (std::size_t i = 0; i < host.size(); ++i) copy(slot.on_device[i], slot.pinned[i], side_);
  slot.copied.record(side_);
  wait(consumer, slot.copied);
  slot.used_on = consumer;
  previous_ = next_;
  next_ = (next_ + 1) % static_cast<int>(slots_.size());
  return slot.on_device;
}

}  // namespace loom
