#include "src/comm/mpi/status.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <random>

#include "loom/comm/backend/call_checks.hpp"
#include "loom/core/mpi_check.hpp"

namespace loom::comm::detail {

namespace {

using Clock = std::chrono::steady_clock;
constexpr int question_tag = 101, answer_tag = 102, notice_tag = 103;
constexpr int report_fields = 4;
std::atomic<bool> aborted_any{false};  // a process-wide fact, as MPI's own state is

std::string join_ranks(const std::vector<int>& ranks) {
  std::string text;
  for (int rank : ranks) text += (text.empty() ? "" : ", ") + std::to_string(rank);
  return text;
}

}  // namespace

std::chrono::milliseconds MpiStatus::answer_grace(std::chrono::milliseconds timeout) {
  return std::clamp<std::chrono::milliseconds>(timeout / 20, std::chrono::milliseconds(20), std::chrono::seconds(1));
}

std::chrono::milliseconds MpiStatus::poll_period(std::chrono::milliseconds timeout) {
  // A fifth of the grace: a peer's answer arrives well within it. Not more often than needed: a
  // wake-up on the core a rank is bound to costs its communication.
  return std::clamp<std::chrono::milliseconds>(answer_grace(timeout) / 5, std::chrono::milliseconds(1),
                                               std::chrono::milliseconds(100));
}

MpiStatus::MpiStatus(MPI_Comm comm, int rank, int size, std::chrono::milliseconds timeout,
                     backend::CallQueue::Handle calls, std::string label)
    : rank_(rank), size_(size), timeout_(timeout), calls_(std::move(calls)), label_(std::move(label)) {
  check_mpi(MPI_Comm_dup(comm, &side_), "MPI_Comm_dup (the status channel)");
  check_mpi(MPI_Comm_set_errhandler(side_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  // An id that a message left over from an earlier communicator (freed, its context id given to
  // this one by MPI) is unlikely to carry.
  if (rank_ == 0) {
    std::random_device entropy;
    id_ = static_cast<std::int64_t>((static_cast<std::uint64_t>(entropy()) << 32) ^ entropy() ^
                                    static_cast<std::uint64_t>(Clock::now().time_since_epoch().count()));
  }
  check_mpi(MPI_Bcast(&id_, 1, MPI_INT64_T, 0, side_), "MPI_Bcast (the status channel's id)");
  report_.id = id_;
  post_question_receive();
  thread_ = std::thread([this] { run(); });
}

MpiStatus::~MpiStatus() {
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
  int finalized = 1;
  MPI_Finalized(&finalized);
  if (finalized) return;
  MPI_Cancel(&question_request_);
  MPI_Wait(&question_request_, MPI_STATUS_IGNORE);
  // Answers and notices to a stopped peer may never be received; give them a moment.
  const auto until = Clock::now() + std::chrono::milliseconds(100);
  reap_sends();
  while (!sends_.empty() && Clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    reap_sends();
  }
  if (!sends_.empty()) {
    backend::note_abandoned_call();                         // MPI_Finalize would wait for them
    new std::deque<Outgoing>(std::move(sends_));            // MPI may still read their buffers: never freed
    return;
  }
  // An aborted communicator's channel is kept: a peer's late message must not reach a later one.
  if (!aborted()) MPI_Comm_free(&side_);
}

void MpiStatus::begin(std::int64_t sequence, std::int64_t collective, const std::string* what) {
  const std::lock_guard lock(mutex_);
  report_ = {id_, sequence, collective, static_cast<std::int64_t>(Phase::waiting)};
  what_ = what;
  started_ = Clock::now();
}

void MpiStatus::transferring() {
  const std::lock_guard lock(mutex_);
  report_.phase = static_cast<std::int64_t>(Phase::transferring);
}

void MpiStatus::end() {
  const std::lock_guard lock(mutex_);
  report_.phase = static_cast<std::int64_t>(Phase::idle);
  what_ = nullptr;
}

void MpiStatus::throw_aborted(const std::string& what) const {
  const std::lock_guard lock(mutex_);
  fail(abort_category_, what, ": the ", label_, " was aborted (", abort_reason_, ")");
}

void MpiStatus::abort(ErrorCategory category, const std::string& reason) {
  const std::lock_guard lock(mutex_);
  abort_locked(category, reason, nullptr);
  notify_ = true;  // the status thread tells the peers (only it uses the status channel)
  wake_.notify_all();
}

void MpiStatus::wait_until_told(std::chrono::milliseconds patience) {
  const auto until = Clock::now() + patience;
  std::unique_lock lock(mutex_);
  while (!told_ && !broken_ && !stopping_ && Clock::now() < until) {
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    lock.lock();
  }
  lock.unlock();
  // The notices are posted: give the eager sends a moment to leave.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

bool any_communicator_aborted() { return aborted_any.load(); }

void MpiStatus::abort_locked(ErrorCategory category, const std::string& reason, const std::string* current_detail) {
  if (aborted_.load(std::memory_order_relaxed)) return;
  aborted_any.store(true);
  abort_category_ = category;
  abort_reason_ = reason;
  at_abort_ = report_;
  at_abort_.phase = static_cast<std::int64_t>(Phase::aborted);
  aborted_.store(true, std::memory_order_release);
  calls_.abort(category, reason, current_detail);
}

void MpiStatus::run() {
  const std::chrono::milliseconds period = poll_period(timeout_);
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    wake_.wait_for(lock, period);
    if (stopping_ || broken_) continue;
    const bool tell = notify_ && !told_;
    told_ = told_ || tell;
    const std::string reason = tell ? abort_reason_ : std::string();
    lock.unlock();
    try {
      if (tell) notify_peers(reason);
      serve(true);
      check_deadline();
      reap_sends();
      calls_.nudge(period);  // a call that nobody waits for, and that woke no worker
    } catch (const Error& e) {  // the status channel itself failed: nothing more to say to the peers
      lock.lock();
      broken_ = true;
      abort_locked(ErrorCategory::mpi, std::string("the status channel failed: ") + e.detail(), nullptr);
      continue;
    }
    lock.lock();
  }
}

void MpiStatus::post_question_receive() {
  check_mpi(MPI_Irecv(question_, 2, MPI_INT64_T, MPI_ANY_SOURCE, question_tag, side_, &question_request_),
            "MPI_Irecv (status questions)");
}

void MpiStatus::send(const void* data, int count, MPI_Datatype type, int peer, int tag, std::shared_ptr<void> buffer) {
  sends_.push_back({std::move(buffer), MPI_REQUEST_NULL});
  check_mpi(MPI_Isend(data, count, type, peer, tag, side_, &sends_.back().request), "MPI_Isend (status channel)");
}

void MpiStatus::reap_sends() {
  while (!sends_.empty()) {
    int sent = 0;
    check_mpi(MPI_Test(&sends_.front().request, &sent, MPI_STATUS_IGNORE), "MPI_Test (status channel)");
    if (!sent) break;
    sends_.pop_front();
  }
}

void MpiStatus::serve(bool take_notices) {
  for (;;) {
    int arrived = 0;
    MPI_Status status;
    check_mpi(MPI_Test(&question_request_, &arrived, &status), "MPI_Test (status questions)");
    if (!arrived) break;
    if (question_[0] == id_) {
      auto answer = std::make_shared<Report>();
      {
        const std::lock_guard lock(mutex_);
        *answer = aborted() ? at_abort_ : report_;
      }
      send(answer.get(), report_fields, MPI_INT64_T, status.MPI_SOURCE, answer_tag, answer);
    }
    post_question_receive();
  }
  while (take_notices) {
    int arrived = 0;
    MPI_Message message = MPI_MESSAGE_NULL;
    MPI_Status status;
    check_mpi(MPI_Improbe(MPI_ANY_SOURCE, notice_tag, side_, &arrived, &message, &status), "MPI_Improbe (notices)");
    if (!arrived) break;
    int bytes = 0;
    check_mpi(MPI_Get_count(&status, MPI_CHAR, &bytes), "MPI_Get_count (notice)");
    std::string text(static_cast<std::size_t>(bytes), '\0');
    check_mpi(MPI_Mrecv(text.data(), bytes, MPI_CHAR, &message, MPI_STATUS_IGNORE), "MPI_Mrecv (notice)");
    // [id][category][reason]
    std::int64_t id = 0;
    if (text.size() < sizeof id + 1) continue;
    std::memcpy(&id, text.data(), sizeof id);
    if (id != id_) continue;  // left over from an earlier communicator
    const auto category = static_cast<ErrorCategory>(text[sizeof id]);
    const std::string reason =
        loom::detail::concat("rank ", status.MPI_SOURCE, " aborted the ", label_, ": ", text.substr(sizeof id + 1));
    const std::lock_guard lock(mutex_);
    abort_locked(category, reason, &reason);
  }
}

void MpiStatus::notify_peers(const std::string& reason) {
  ErrorCategory category;
  {
    const std::lock_guard lock(mutex_);
    category = abort_category_;
  }
  auto text = std::make_shared<std::string>(sizeof id_, '\0');
  std::memcpy(text->data(), &id_, sizeof id_);
  *text += static_cast<char>(category);
  *text += reason;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer != rank_) send(text->data(), static_cast<int>(text->size()), MPI_CHAR, peer, notice_tag, text);
  }
}

void MpiStatus::check_deadline() {
  Report mine;
  std::string what;
  {
    const std::lock_guard lock(mutex_);
    if (aborted() || report_.phase == static_cast<std::int64_t>(Phase::idle)) return;
    if (Clock::now() - started_ < timeout_) return;
    mine = report_;
    what = what_ ? *what_ : label_ + " call #" + std::to_string(report_.sequence);
  }
  const std::string detail = survey(mine);
  {
    const std::lock_guard lock(mutex_);
    // The call may have completed while the peers were asked (a peer that was only late).
    if (report_.sequence != mine.sequence || report_.phase == static_cast<std::int64_t>(Phase::idle)) return;
    const std::string reason = what + ": " + detail;
    abort_locked(ErrorCategory::timeout, reason, &detail);
    told_ = true;
  }
  notify_peers(what + ": " + detail);
}

std::string MpiStatus::survey(const Report& mine) {
  const auto asked = std::make_shared<std::array<std::int64_t, 2>>(std::array<std::int64_t, 2>{id_, mine.sequence});
  std::vector<Report> answers(static_cast<std::size_t>(size_));
  std::vector<MPI_Request> replies(static_cast<std::size_t>(size_), MPI_REQUEST_NULL);
  const auto listen = [&](int peer) {
    check_mpi(MPI_Irecv(&answers[static_cast<std::size_t>(peer)], report_fields, MPI_INT64_T, peer, answer_tag, side_,
                        &replies[static_cast<std::size_t>(peer)]),
              "MPI_Irecv (status answer)");
  };
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    listen(peer);
    send(asked->data(), 2, MPI_INT64_T, peer, question_tag, asked);
  }
  // Keep answering while asking: the peers that wait for this rank are asking too.
  const std::chrono::milliseconds grace = answer_grace(timeout_);
  const auto until = Clock::now() + grace;
  for (;;) {
    serve(false);
    bool all = true;
    for (int peer = 0; peer < size_; ++peer) {
      MPI_Request& reply = replies[static_cast<std::size_t>(peer)];
      int done = 1;
      if (reply != MPI_REQUEST_NULL) check_mpi(MPI_Test(&reply, &done, MPI_STATUS_IGNORE), "MPI_Test (status answer)");
      if (done && peer != rank_ && answers[static_cast<std::size_t>(peer)].id != id_) {  // stale: listen on
        listen(peer);
        done = 0;
      }
      all = all && done;
    }
    if (all || Clock::now() >= until) break;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  std::vector<int> silent;
  std::string others;
  for (int peer = 0; peer < size_; ++peer) {
    MPI_Request& reply = replies[static_cast<std::size_t>(peer)];
    if (peer == rank_) continue;
    if (reply != MPI_REQUEST_NULL) {  // no answer: stop listening for it
      MPI_Cancel(&reply);
      MPI_Wait(&reply, MPI_STATUS_IGNORE);
      silent.push_back(peer);
      continue;
    }
    const Report& theirs = answers[static_cast<std::size_t>(peer)];
    if (theirs.phase == static_cast<std::int64_t>(Phase::idle)) {
      others += loom::detail::concat("; rank ", peer, " has not reached this call (",
                                     theirs.sequence == 0 ? std::string("it has made no call yet")
                                                          : loom::detail::concat("it is busy after its call #", theirs.sequence),
                                     ")");
    } else if (theirs.phase == static_cast<std::int64_t>(Phase::aborted)) {
      others += mine.collective > 0 && theirs.collective == mine.collective
                    ? loom::detail::concat("; rank ", peer, " has given up on this call too")
                    : loom::detail::concat("; rank ", peer, " has aborted the communicator (at its call #",
                                           theirs.sequence, ")");
    } else if (mine.collective > 0 && theirs.collective == mine.collective) {
      others += loom::detail::concat("; rank ", peer, " is waiting in this call too");
    } else {
      others += loom::detail::concat("; rank ", peer, " is waiting in its call #", theirs.sequence);
    }
  }
  std::string detail = backend::not_completed_within(timeout_);
  if (!silent.empty()) {
    detail += loom::detail::concat("; rank(s) ", join_ranks(silent), " did not answer within ", grace.count(),
                                   " ms (stopped or dead)");
  }
  return detail + others + "; the " + label_ + " is aborted";
}

}  // namespace loom::comm::detail
