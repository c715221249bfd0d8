// How the MPI backend waits for its nonblocking calls: MPI_Test in a tight loop for the first
// 100 ms, then with sleeps growing to 2 ms (a rank waiting for a stopped peer uses a few percent of
// a core), bounded by the communicator's timeout. Every call has a sequence number. While it waits, a rank answers
// its peers' questions "which call are you in?" on a duplicate of the communicator; when a call
// times out, the rank asks every peer and names, in the timeout Error, the ranks that did not
// answer (stopped, dead, or not yet at a call) and where the others are.
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

namespace loom::comm::detail {

class MpiProgress {
 public:
  // comm: the communicator's own (duplicated here for the questions and answers).
  MpiProgress(MPI_Comm comm, int rank, int size, std::chrono::milliseconds timeout);
  ~MpiProgress();
  MpiProgress(const MpiProgress&) = delete;
  MpiProgress& operator=(const MpiProgress&) = delete;

  // The next call's number (1, 2, ...), taken when the call is enqueued.
  std::int64_t next_sequence() noexcept { return ++issued_; }

  // Waits for `request` as call `sequence` (one thread at a time: the communicator's worker).
  // Throws a timeout Error after the timeout, leaving the request pending and keeping `buffers`
  // (what the request reads and writes) alive for as long as it may still use them: until it
  // completes at destruction, or forever if the peers never join (MPI must then not be finalized).
  void wait(MPI_Request& request, const std::string& what, std::int64_t sequence, std::shared_ptr<void> buffers);

  // Waits, as wait() does, until a message from `peer` with `tag` has arrived on comm, and takes
  // it (MPI_Improbe: `message` is then this thread's to receive with MPI_Mrecv).
  void wait_for_message(int peer, int tag, MPI_Comm comm, MPI_Message& message, MPI_Status& status,
                        const std::string& what, std::int64_t sequence);

  // Throws a timeout Error once a call has timed out (the communicator is then unusable).
  void require_not_aborted(const std::string& what) const;

  // The time to wait for the peers' answers after a timeout.
  static std::chrono::milliseconds answer_grace(std::chrono::milliseconds timeout);

 private:
  void serve();  // answers the questions that have arrived
  // Calls done() (true: finished) with the spin-then-sleep rhythm until it is true or the
  // timeout passes; then on_timeout() and time_out().
  template <class Done, class OnTimeout>
  void wait_until(Done&& done, OnTimeout&& on_timeout, const std::string& what, std::int64_t sequence);
  void post_question_receive();
  [[noreturn]] void time_out(const std::string& what, std::int64_t sequence);

  MPI_Comm side_ = MPI_COMM_NULL;
  int rank_, size_;
  std::chrono::milliseconds timeout_;
  std::atomic<std::int64_t> issued_{0};
  std::int64_t waiting_in_ = 0;  // the call being waited for, 0 between calls
  std::int64_t question_ = 0;    // the receive buffer of the pending question
  std::int64_t asked_ = 0;       // the send buffer of this rank's questions
  std::string abort_reason_;
  MPI_Request question_request_ = MPI_REQUEST_NULL;
  struct Answer {
    std::int64_t value;
    MPI_Request request;
  };
  std::deque<Answer> answers_;             // answers being sent
  std::vector<MPI_Request> abandoned_;     // requests of calls that timed out
  std::vector<std::shared_ptr<void>> kept_;  // and their buffers
};

}  // namespace loom::comm::detail
