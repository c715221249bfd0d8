// Host tensors (a model's batches) onto a GPU without stalling the host or the compute stream.
// Each host tensor is copied into page-locked memory, then to the device on a stream of the
// stager's own, and the caller's stream waits for that copy on the device (an event), not the
// host: a copy from pageable memory would make the host wait, and a copy on the compute stream
// would queue behind the step before. A ring of `slots` buffer sets lets the host run ahead of the
// device by a bounded number of batches (about 2 x slots): a slot's page-locked buffers are
// refilled once their last copy is done (the host waits for that copy, never for computation),
// and its device buffers once the work that read them is: the side stream waits for an event
// recorded on the caller's stream at the next stage() call, which is why work reading a batch must
// be enqueued before that call (as a training step's forward and backward are before the next
// micro-batch's forward).
//
// On the CPU the same ring runs with plain host buffers and immediate copies (what the tests check).
#pragma once

#include <cstdint>
#include <vector>

#include "loom/core/device.hpp"
#include "loom/core/stream.hpp"
#include "loom/core/tensor.hpp"

namespace loom {

class DeviceStager {
 public:
  // slots >= 2 (an invalid_argument Error otherwise).
  explicit DeviceStager(Device device, int slots = 4);
  // Waits for its copies and the readers it knows of; the readers of the last batch (whose end
  // the next call would have marked) must be finished by the caller, e.g. by synchronizing.
  ~DeviceStager();
  DeviceStager(const DeviceStager&) = delete;
  DeviceStager& operator=(const DeviceStager&) = delete;

  // Device copies of host tensors, ready for work enqueued on `stream` (on the stager's device;
  // the default StreamRef: the device's default stream) after this call. Work that reads them must
  // be enqueued before the next call; they keep their values for slots - 1 further calls. The
  // host tensors may change once it returns. `stream` must live until the next call.
  std::vector<Tensor> stage(const std::vector<Tensor>& host, StreamRef stream);
  Device device() const noexcept { return device_; }
  int slots() const noexcept { return static_cast<int>(slots_.size()); }

 private:
  struct Slot {
    std::vector<Tensor> pinned, on_device;  // one pair per tensor staged
    Event copied, released;                 // the copy's end (side stream); the readers' end (caller's)
    StreamRef used_on;
    explicit Slot(Device device) : copied(device), released(device) {}
  };
  Device device_;
  Stream side_;
  std::vector<Slot> slots_;
  int next_ = 0, previous_ = -1;
};

}  // namespace loom
