// The MPI backend's status thread: the watchdog of one communicator's calls and its voice to the
// peers, so that the calls themselves can be MPI's fast blocking collectives.
//
// The thread that runs a call (the CallQueue's worker, or the thread waiting for it) says when the
// call begins, when it enters a blocking MPI call and when it ends (begin/transferring/end: a mutex,
// no MPI). This thread wakes every poll_period (a fifth of the answer grace, 1 to 100 ms) and, on a
// duplicate of the communicator that only it uses:
//   - answers the peers' question "which call are you in?" with what the worker said last;
//   - takes abort notices from peers: the communicator is aborted with the peer's reason;
//   - fails the running call once it has run for the timeout: it asks every peer where it is,
//     waits up to answer_grace for the answers, aborts the CallQueue (the running call fails with
//     an Error naming the ranks that did not answer and where the others are; queued and later
//     calls fail at once) and sends the reason to every peer, so that a rank still coming to the
//     call, or resuming after a stop, fails at once instead of waiting out its own timeout;
//   - nudges the CallQueue's worker to start a call nobody has waited for.
// A call waiting for peers (every collective algorithm, send, recv, the arrival gate) sees
// aborted() and returns. Only MPI_Comm_split blocks inside MPI, after the gate has seen every rank
// arrive; if a peer stops in it, the call fails here and its thread is abandoned by the CallQueue
// (MPI must then not be finalized).
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "loom/comm/backend/call_queue.hpp"
#include "loom/core/error.hpp"

namespace loom::comm::detail {

// True once any MPI communicator of this process was aborted: a peer may be stopped or gone, and
// MPI_Finalize, which waits for every process, could wait forever.
bool any_communicator_aborted();

class MpiStatus {
 public:
  // comm: the communicator's own (duplicated here); label: its name in messages ("MPI communicator").
  MpiStatus(MPI_Comm comm, int rank, int size, std::chrono::milliseconds timeout, backend::CallQueue::Handle calls,
            std::string label);
  ~MpiStatus();  // stops the thread; notices and answers still unsent are abandoned
  MpiStatus(const MpiStatus&) = delete;
  MpiStatus& operator=(const MpiStatus&) = delete;

  // The worker's reports. collective: the number of collective calls so far including this one
  // (0 for point-to-point); what: the call's description (kept until end()).
  void begin(std::int64_t sequence, std::int64_t collective, const std::string* what);
  void transferring();  // inside MPI's blocking call from now on
  void end();

  bool aborted() const noexcept { return aborted_.load(std::memory_order_acquire); }
  // Throws the abort as seen by call `what` (after aborted() is true).
  [[noreturn]] void throw_aborted(const std::string& what) const;
  // Aborts from the worker (an MPI error, mismatched collectives): fails the running call with
  // `reason`, queued and later calls too, and tells the peers.
  void abort(ErrorCategory category, const std::string& reason);
  // After abort(): waits (at most `patience`) until the notice to the peers is on its way.
  void wait_until_told(std::chrono::milliseconds patience);

  static std::chrono::milliseconds answer_grace(std::chrono::milliseconds timeout);
  static std::chrono::milliseconds poll_period(std::chrono::milliseconds timeout);

 private:
  enum class Phase : std::int64_t { idle, waiting, transferring, aborted };
  struct Report {  // what this rank answers, and what a peer answered
    std::int64_t id = 0;          // the communicator's (a stale message of an older one is ignored)
    std::int64_t sequence = 0;    // the call it is in, or the last one it finished (idle)
    std::int64_t collective = 0;  // its collective count at that call
    std::int64_t phase = 0;
  };
  struct Outgoing {  // a send in flight and its buffer
    std::shared_ptr<void> buffer;
    MPI_Request request = MPI_REQUEST_NULL;
  };

  void run();
  void serve(bool take_notices);  // answers questions; takes abort notices unless surveying
  void check_deadline();
  std::string survey(const Report& mine);  // asks the peers where they are; describes them
  // Under mutex_: the first abort wins; fails the CallQueue (the running call too with current_detail).
  void abort_locked(ErrorCategory category, const std::string& reason, const std::string* current_detail);
  void notify_peers(const std::string& reason);
  void send(const void* data, int count, MPI_Datatype type, int peer, int tag, std::shared_ptr<void> buffer);
  void post_question_receive();
  void reap_sends();

  MPI_Comm side_ = MPI_COMM_NULL;
  int rank_, size_;
  std::chrono::milliseconds timeout_;
  backend::CallQueue::Handle calls_;
  std::string label_;

  // What the worker said (under mutex_).
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  Report report_;
  Report at_abort_;  // what this rank answers once aborted: the call it was in, or its last one
  const std::string* what_ = nullptr;
  std::chrono::steady_clock::time_point started_{};
  bool stopping_ = false;
  bool notify_ = false, told_ = false;  // an abort by the worker is to be told to the peers; it was
  bool broken_ = false;                 // the status channel failed

  std::atomic<bool> aborted_{false};
  ErrorCategory abort_category_ = ErrorCategory::timeout;  // under mutex_ once aborted_
  std::string abort_reason_;

  // This thread's own (no lock).
  std::int64_t id_ = 0;  // chosen by rank 0: every message on the status channel carries it
  std::int64_t question_[2] = {0, 0};  // the asker's id and call
  MPI_Request question_request_ = MPI_REQUEST_NULL;
  std::deque<Outgoing> sends_;
  std::thread thread_;
};

}  // namespace loom::comm::detail
