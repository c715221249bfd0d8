// The nonblocking transfers of the MPI backend's running call: how they are waited for, the
// scratch memory they use, and what is kept when a call is abandoned.
//
// Waiting: MPI_Test in a tight loop for the first 20 us (a peer a few microseconds behind), then
// with yields up to 100 ms (longer than a healthy step's waits, so training is not slowed;
// nonblocking requests advance only while they are tested), then with sleeps growing to 2 ms (a
// rank waiting for a stopped peer uses a few percent of a core), until the requests complete or
// the communicator is aborted (MpiStatus's watchdog, which then names the missing ranks).
// A call's requests left pending by an abort are parked (receives cancelled; a send completes only
// if its peer still receives it), and the buffers they may still read or write (the call's
// tensors, held for it, and the scratch) are never freed while they are pending.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "src/comm/mpi/status.hpp"

namespace loom::comm::detail {

class MpiTransfers {
 public:
  // Scratch slots: 0 what arrives, 1 and 2 the algorithms' partial results, 3 the backend's
  // staging (f16/bf16 widened to f32, a result that may not be written in place).
  static constexpr int scratch_slots = 4;
  static constexpr int staging_slot = 3;

  explicit MpiTransfers(MpiStatus& status) : status_(status) {}
  // Parked sends get 100 ms to complete (peers that came late); if some do not, they and
  // their buffers are never freed and MPI must not be finalized (backend::note_abandoned_call).
  ~MpiTransfers();
  MpiTransfers(const MpiTransfers&) = delete;
  MpiTransfers& operator=(const MpiTransfers&) = delete;

  // A buffer of the running call (its tensors), kept past the call if the call is abandoned.
  void hold(std::shared_ptr<void> buffer) { held_.push_back(std::move(buffer)); }
  // The running call has ended and none of its requests is pending.
  void release() { held_.clear(); }

  // At least `bytes` of scratch memory in slot 0..scratch_slots-1, reused from call to call (a fresh
  // allocation of a large buffer costs its page faults on every call).
  void* scratch(int slot, std::size_t bytes);
  template <class T>
  T* scratch(int slot, std::size_t count) {
    return static_cast<T*>(scratch(slot, count * sizeof(T)));
  }
  // `count` null requests, and `count` pointers, reused from call to call (an allocation and a
  // free cost a small call more than MPI's own bookkeeping). One algorithm step uses them at a time.
  std::span<MPI_Request> requests(std::size_t count);
  std::span<const void*> pointers(std::size_t count);

  // Returns once every request has completed. Throws the abort (or an MPI error, which aborts the
  // communicator), parking the requests still pending, and those of `also_pending`.
  void wait_all(std::span<MPI_Request> requests, const std::string& what, std::span<MPI_Request> also_pending = {});

  // Waits, as wait_all does, until a message from `peer` with `tag` has arrived on comm, and takes
  // it (MPI_Improbe: `message` is then this thread's to receive with MPI_Mrecv).
  void wait_for_message(int peer, int tag, MPI_Comm comm, MPI_Message& message, MPI_Status& status,
                        const std::string& what);

 private:
  template <class Done>
  void poll(Done&& done, const std::string& what);
  void park(std::span<MPI_Request> requests);

  MpiStatus& status_;
  std::vector<std::shared_ptr<void>> held_;
  std::shared_ptr<std::vector<unsigned char>> scratch_[scratch_slots];
  std::vector<MPI_Request> requests_;
  std::vector<const void*> pointers_;
  std::vector<MPI_Request> parked_;
  std::vector<std::shared_ptr<void>> kept_;
};

}  // namespace loom::comm::detail
