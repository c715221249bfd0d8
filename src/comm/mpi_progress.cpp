#include "src/comm/mpi_progress.hpp"

#include <algorithm>
#include <thread>

#include "loom/comm/backend/call_checks.hpp"
#include "loom/comm/backend/call_queue.hpp"
#include "loom/core/error.hpp"
#include "loom/core/mpi_check.hpp"

namespace loom::comm::detail {

namespace {

using Clock = std::chrono::steady_clock;
constexpr int question_tag = 101, answer_tag = 102;
// Nonblocking collectives advance only while they are tested: a wait tests in a tight loop for
// the first 100 ms (longer than a healthy step's waits, so training is not slowed), then sleeps
// between tests, 50 us at first, up to 200 us within the first second and 2 ms after it (a rank
// waiting for a stopped peer then uses a few percent of a core, not all of it).
constexpr auto spin_time = std::chrono::milliseconds(100);
constexpr auto patient_after = std::chrono::seconds(1);
constexpr auto first_sleep = std::chrono::microseconds(50), short_sleep = std::chrono::microseconds(200),
               longest_sleep = std::chrono::microseconds(2000);

}  // namespace

std::chrono::milliseconds MpiProgress::answer_grace(std::chrono::milliseconds timeout) {
  return std::clamp<std::chrono::milliseconds>(timeout / 20, std::chrono::milliseconds(20), std::chrono::milliseconds(1000));
}

MpiProgress::MpiProgress(MPI_Comm comm, int rank, int size, std::chrono::milliseconds timeout)
    : rank_(rank), size_(size), timeout_(timeout) {
  check_mpi(MPI_Comm_dup(comm, &side_), "MPI_Comm_dup (the status channel)");
  check_mpi(MPI_Comm_set_errhandler(side_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  post_question_receive();
}

MpiProgress::~MpiProgress() {
  int finalized = 1;
  MPI_Finalized(&finalized);
  if (finalized) return;
  MPI_Cancel(&question_request_);
  MPI_Wait(&question_request_, MPI_STATUS_IGNORE);
  // Calls that timed out complete if their peers joined later; give them a moment.
  const auto until = Clock::now() + std::chrono::milliseconds(100);
  bool pending = false;
  do {
    pending = false;
    for (MPI_Request& request : abandoned_) {
      int done = 0;
      MPI_Test(&request, &done, MPI_STATUS_IGNORE);
      pending = pending || !done;
    }
    for (Answer& answer : answers_) {
      int done = 0;
      MPI_Test(&answer.request, &done, MPI_STATUS_IGNORE);
      pending = pending || !done;
    }
    if (pending) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  } while (pending && Clock::now() < until);
  if (pending) {
    backend::note_abandoned_call();  // MPI_Finalize would wait for them
    new std::vector<std::shared_ptr<void>>(std::move(kept_));  // MPI may still write into them: never freed
    new std::deque<Answer>(std::move(answers_));                 // nor read from these (a moved deque keeps its elements)
    return;
  }
  MPI_Comm_free(&side_);
}

void MpiProgress::post_question_receive() {
  check_mpi(MPI_Irecv(&question_, 1, MPI_INT64_T, MPI_ANY_SOURCE, question_tag, side_, &question_request_),
            "MPI_Irecv (status questions)");
}

void MpiProgress::serve() {
  for (;;) {
    int arrived = 0;
    MPI_Status status;
    check_mpi(MPI_Test(&question_request_, &arrived, &status), "MPI_Test (status questions)");
    if (!arrived) break;
    answers_.push_back({waiting_in_, MPI_REQUEST_NULL});
    check_mpi(MPI_Isend(&answers_.back().value, 1, MPI_INT64_T, status.MPI_SOURCE, answer_tag, side_,
                        &answers_.back().request),
              "MPI_Isend (status answer)");
    post_question_receive();
  }
  while (!answers_.empty()) {
    int sent = 0;
    check_mpi(MPI_Test(&answers_.front().request, &sent, MPI_STATUS_IGNORE), "MPI_Test (status answer)");
    if (!sent) break;
    answers_.pop_front();
  }
}

template <class Done, class OnTimeout>
void MpiProgress::wait_until(Done&& done, OnTimeout&& on_timeout, const std::string& what, std::int64_t sequence) {
  waiting_in_ = sequence;
  const auto start = Clock::now(), deadline = start + timeout_;
  auto sleep = std::chrono::duration_cast<std::chrono::microseconds>(first_sleep);
  for (;;) {
    try {
      if (done()) break;
      serve();
    } catch (const Error& e) {  // an MPI error: the request may still be pending, so park it and abort
      on_timeout();
      waiting_in_ = 0;
      abort_reason_ = e.what();
      throw;
    }
    const auto now = Clock::now();
    if (now >= deadline) {
      on_timeout();
      time_out(what, sequence);
    }
    if (now - start < spin_time) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(sleep);
      const auto cap = now - start < patient_after ? short_sleep : longest_sleep;
      sleep = std::min<std::chrono::microseconds>(sleep * 2, cap);
    }
  }
  waiting_in_ = 0;
}

void MpiProgress::wait(MPI_Request& request, const std::string& what, std::int64_t sequence,
                       std::shared_ptr<void> buffers) {
  wait_until(
      [&] {
        int finished = 0;
        check_mpi(MPI_Test(&request, &finished, MPI_STATUS_IGNORE), what);
        return finished != 0;
      },
      [&] {
        abandoned_.push_back(request);
        kept_.push_back(std::move(buffers));
        request = MPI_REQUEST_NULL;
      },
      what, sequence);
}

void MpiProgress::wait_for_message(int peer, int tag, MPI_Comm comm, MPI_Message& message, MPI_Status& status,
                                   const std::string& what, std::int64_t sequence) {
  wait_until(
      [&] {
        int arrived = 0;
        check_mpi(MPI_Improbe(peer, tag, comm, &arrived, &message, &status), what);
        return arrived != 0;
      },
      [] {}, what, sequence);
}

void MpiProgress::time_out(const std::string& what, std::int64_t sequence) {
  // Ask every peer which call it is in; the ones waiting in a call answer within a sleep step.
  std::vector<std::int64_t> answer(static_cast<std::size_t>(size_), -1);
  std::vector<MPI_Request> asks, replies(static_cast<std::size_t>(size_), MPI_REQUEST_NULL);
  asked_ = sequence;  // a member: the sends may still read it after this call has thrown
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    asks.push_back(MPI_REQUEST_NULL);
    MPI_Isend(&asked_, 1, MPI_INT64_T, peer, question_tag, side_, &asks.back());
    MPI_Irecv(&answer[static_cast<std::size_t>(peer)], 1, MPI_INT64_T, peer, answer_tag, side_,
              &replies[static_cast<std::size_t>(peer)]);
  }
  const auto until = Clock::now() + answer_grace(timeout_);
  for (;;) {
    try {
      serve();
    } catch (const Error&) {  // the status channel failed: report what is known
      break;
    }
    bool all = true;
    for (MPI_Request& reply : replies) {
      int done = 1;
      if (reply != MPI_REQUEST_NULL) MPI_Test(&reply, &done, MPI_STATUS_IGNORE);
      all = all && done;
    }
    if (all || Clock::now() >= until) break;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  std::string silent, others;
  for (int peer = 0; peer < size_; ++peer) {
    MPI_Request& reply = replies[static_cast<std::size_t>(peer)];
    if (peer == rank_) continue;
    if (reply != MPI_REQUEST_NULL) {  // no answer: stop listening for it
      MPI_Cancel(&reply);
      MPI_Wait(&reply, MPI_STATUS_IGNORE);
      silent += loom::detail::concat(silent.empty() ? "" : ", ", peer);
      continue;
    }
    const std::int64_t at = answer[static_cast<std::size_t>(peer)];
    others += at == sequence ? loom::detail::concat("; rank ", peer, " is waiting in this call too")
                             : loom::detail::concat("; rank ", peer, " is waiting in its call #", at);
  }
  for (MPI_Request& ask : asks) MPI_Request_free(&ask);
  waiting_in_ = 0;
  std::string detail = loom::detail::concat(what, ": ", backend::not_completed_within(timeout_));
  if (!silent.empty()) {
    detail += loom::detail::concat("; rank(s) ", silent, " did not answer within ", answer_grace(timeout_).count(),
                                   " ms (stopped, dead, or busy before reaching call #", sequence, ")");
  }
  detail += others;
  abort_reason_ = detail;
  fail(ErrorCategory::timeout, detail, "; the MPI communicator is aborted");
}

void MpiProgress::require_not_aborted(const std::string& what) const {
  if (abort_reason_.empty()) return;
  fail(ErrorCategory::timeout, what, ": not run: the MPI communicator was aborted by an earlier timeout (",
       abort_reason_, ")");
}

}  // namespace loom::comm::detail
