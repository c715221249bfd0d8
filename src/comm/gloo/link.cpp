#include "src/comm/gloo/link.hpp"

#include <gloo/transport/context.h>
#include <gloo/transport/unbound_buffer.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <system_error>

#include "loom/comm/backend/call_checks.hpp"

namespace loom::comm::detail {

namespace {

using Clock = std::chrono::steady_clock;

// Bit 63: notices; bit 62: point-to-point; else a collective's number (bits 16..61) and step.
constexpr std::uint64_t notice_slot = std::uint64_t{1} << 63;
constexpr std::uint64_t point_to_point_bit = std::uint64_t{1} << 62;
constexpr std::size_t notice_bytes = 1024;  // per peer: a receive is posted from each (see listen)
// Gloo's own wait limit, past loom's deadline: reached only if the watch thread could not
// interrupt a wait (Gloo then closes every connection of the context).
constexpr auto gloo_backstop = std::chrono::seconds(30);
// A notice receive that nothing but a peer or the destructor ends (Gloo would close the
// connections at its end).
constexpr auto forever = std::chrono::hours(24 * 365);

}  // namespace

std::uint64_t collective_slot(std::int64_t collective, int step) {
  return (static_cast<std::uint64_t>(collective) << 16 | static_cast<std::uint64_t>(step)) & (point_to_point_bit - 1);
}

std::uint64_t point_to_point_slot(std::int64_t message, bool payload) {
  return point_to_point_bit | (static_cast<std::uint64_t>(message) << 1 & (point_to_point_bit - 1)) |
         (payload ? 1u : 0u);
}

GlooLink::GlooLink(std::shared_ptr<gloo::transport::Context> transport, std::chrono::milliseconds timeout,
                   backend::CallQueue::Handle calls, std::string label)
    : transport_(std::move(transport)), rank_(transport_->rank), size_(transport_->size), timeout_(timeout),
      calls_(std::move(calls)), label_(std::move(label)), notice_(notice_bytes * static_cast<std::size_t>(size_)) {
  notice_buffers_.resize(static_cast<std::size_t>(size_));
  heard_.assign(static_cast<std::size_t>(size_), false);
  lost_.assign(static_cast<std::size_t>(size_), std::string());
  lost_at_.assign(static_cast<std::size_t>(size_), Clock::time_point{});
  for (int peer = 0; peer < size_; ++peer)
    if (peer != rank_)
      notice_buffers_[static_cast<std::size_t>(peer)] =
          transport_->createUnboundBuffer(notice_.data() + static_cast<std::size_t>(peer) * notice_bytes, notice_bytes);
  try {
    watcher_ = std::thread([this] { watch(); });
    for (int peer = 0; peer < size_; ++peer)
      if (peer != rank_) listeners_.emplace_back([this, peer] { listen(peer); });
  } catch (const std::system_error& e) {  // out of threads: those started stop, and the caller learns why
    stop_threads();
    throw Error(ErrorCategory::io, loom::detail::concat(label_, ": could not start its ", size_, " threads (one per "
                                                        "peer and a watch thread): ", e.what()));
  }
}

void GlooLink::stop_threads() {
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  for (Buffer& notice : notice_buffers_)
    if (notice) notice->abortWaitRecv();
  for (std::thread& listener : listeners_) listener.join();
  if (watcher_.joinable()) watcher_.join();
}

GlooLink::~GlooLink() {
  deliver_notices();  // those of an abort by a timeout or an error, sent from the watch thread
  stop_threads();
  // The buffers before the memory they cover (held_, notice_, outgoing_).
  call_buffers_.clear();
  kept_buffers_.clear();
  outgoing_buffers_.clear();
  notice_buffers_.clear();
}

void GlooLink::begin(const std::string* what) {
  const std::lock_guard lock(mutex_);
  what_ = what;
  deadline_ = Clock::now() + timeout_;
}

void GlooLink::end() {
  const std::lock_guard lock(mutex_);
  what_ = nullptr;
  waiting_ = nullptr;
  if (aborted_) {
    for (Buffer& buffer : call_buffers_) kept_buffers_.push_back(std::move(buffer));
  } else {
    held_.clear();
  }
  call_buffers_.clear();
}

void GlooLink::hold(std::shared_ptr<void> memory) {
  const std::lock_guard lock(mutex_);
  held_.push_back(std::move(memory));
}

gloo::transport::UnboundBuffer& GlooLink::buffer(const void* data, std::size_t bytes) {
  // Gloo's buffers are read-write; a send only reads.
  call_buffers_.push_back(transport_->createUnboundBuffer(const_cast<void*>(data), bytes));
  return *call_buffers_.back();
}

void GlooLink::send(gloo::transport::UnboundBuffer& buffer, int peer, std::uint64_t slot, std::size_t offset,
                    std::size_t bytes) {
  try {
    buffer.send(peer, slot, offset, bytes);
  } catch (const std::exception& e) {
    connection_failed(peer, false, e.what());
  }
}

void GlooLink::recv(gloo::transport::UnboundBuffer& buffer, int peer, std::uint64_t slot, std::size_t offset,
                    std::size_t bytes) {
  try {
    buffer.recv(peer, slot, offset, bytes);
  } catch (const std::exception& e) {
    connection_failed(peer, true, e.what());
  }
}

void GlooLink::connection_failed(int peer, bool receiving, const std::string& failure) {
  std::unique_lock lock(mutex_);
  // A peer that aborted sent its notice before closing: it comes first on the connection, and the
  // peer's listener ends on it (or on the same failure). Its reason is the one to give.
  if (!failure.empty() && peer != rank_)
    changed_.wait_for(lock, std::chrono::milliseconds(200),
                      [&] { return aborted_ || heard_[static_cast<std::size_t>(peer)]; });
  if (aborted_) {
    lock.unlock();
    throw_aborted();
  }
  std::string reason = loom::detail::concat(what_ != nullptr ? *what_ : label_, ": the connection to rank ", peer,
                                            " failed while ", receiving ? "receiving from" : "sending to",
                                            " it (its process may have ended): ", failure);
  abort_locked(ErrorCategory::io, reason, true);
  lock.unlock();
  throw Error(ErrorCategory::io, reason);
}

void GlooLink::wait_send(gloo::transport::UnboundBuffer& buffer, int peer) { wait(buffer, peer, false); }

void GlooLink::wait_recv(gloo::transport::UnboundBuffer& buffer, int peer) { wait(buffer, peer, true); }

void GlooLink::wait(gloo::transport::UnboundBuffer& buffer, int peer, bool receiving) {
  std::chrono::milliseconds limit{};
  {
    const std::lock_guard lock(mutex_);
    if (aborted_) {
      // Let the transfer go: nothing will wait for it.
      receiving ? buffer.abortWaitRecv() : buffer.abortWaitSend();
    }
    waiting_ = &buffer;
    waiting_peer_ = peer;
    waiting_receive_ = receiving;
    limit = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now()) + gloo_backstop;
  }
  bool done = false;
  std::string failure;
  try {
    done = receiving ? buffer.waitRecv(nullptr, std::max(limit, std::chrono::milliseconds(1)))
                     : buffer.waitSend(nullptr, std::max(limit, std::chrono::milliseconds(1)));
  } catch (const std::exception& e) {
    failure = e.what();
  }
  {
    const std::lock_guard lock(mutex_);
    waiting_ = nullptr;
    if (done && failure.empty()) return;
    if (failure.empty()) failure = lost_[static_cast<std::size_t>(peer)];  // let go by the watch thread
  }
  // Interrupted by an abort (thrown as such), or the connection failed: Gloo says why (a closed
  // connection: the peer's process ended).
  connection_failed(peer, receiving, failure);
}

bool GlooLink::aborted() const {
  const std::lock_guard lock(mutex_);
  return aborted_;
}

bool GlooLink::call_timed_out() const {
  const std::lock_guard lock(mutex_);
  return call_timed_out_;
}

void GlooLink::throw_aborted() const {
  const std::lock_guard lock(mutex_);
  // The reason names the call that failed; a later call says it was not run because of it.
  if (what_ != nullptr && abort_reason_.rfind(*what_, 0) != 0)
    throw Error(abort_category_, loom::detail::concat(*what_, ": ", abort_reason_));
  throw Error(abort_category_, abort_reason_);
}

void GlooLink::abort(ErrorCategory category, const std::string& reason) {
  {
    const std::lock_guard lock(mutex_);
    abort_locked(category, reason, true);
  }
  deliver_notices();
}

void GlooLink::deliver_notices() {
  // A notice leaves as soon as it is written to the peer's socket (its receive is posted from the
  // start); a quarter of a second is ample, and bounds the wait when a peer's socket is full.
  const auto until = Clock::now() + std::chrono::milliseconds(250);
  std::unique_lock lock(mutex_);
  changed_.wait_until(lock, until, [&] { return !notify_ || told_; });
  std::vector<gloo::transport::UnboundBuffer*> sends;
  for (std::size_t i = delivered_; i < outgoing_buffers_.size(); ++i) sends.push_back(outgoing_buffers_[i].get());
  delivered_ = outgoing_buffers_.size();
  lock.unlock();
  if (sends.empty()) return;
  // The bound is kept by interrupting the waits that remain at `until` (the buffers stay, with the
  // link, for a notice still leaving).
  std::mutex timer_mutex;
  std::condition_variable timer_changed;
  bool finished = false;
  std::thread timer([&] {
    std::unique_lock timer_lock(timer_mutex);
    if (timer_changed.wait_until(timer_lock, until, [&] { return finished; })) return;
    finished = true;
    for (gloo::transport::UnboundBuffer* send : sends) send->abortWaitSend();
  });
  for (gloo::transport::UnboundBuffer* send : sends) {
    {
      const std::lock_guard timer_lock(timer_mutex);
      if (finished) break;
    }
    try {
      if (!send->waitSend(nullptr, forever)) break;  // interrupted at `until`
    } catch (const std::exception&) {  // a peer that is gone: the others may still be told
    }
  }
  {
    const std::lock_guard timer_lock(timer_mutex);
    finished = true;
  }
  timer_changed.notify_all();
  timer.join();
}

void GlooLink::abort_locked(ErrorCategory category, const std::string& reason, bool tell_peers) {
  if (aborted_) return;
  aborted_ = true;
  abort_category_ = category;
  abort_reason_ = reason;
  if (waiting_ != nullptr) waiting_receive_ ? waiting_->abortWaitRecv() : waiting_->abortWaitSend();
  // Queued and later calls fail at once; the running one fails where it waits.
  calls_.abort(category, reason, nullptr);
  notify_ = tell_peers && size_ > 1;
  changed_.notify_all();
}

void GlooLink::watch() {
  const auto tick = std::clamp<std::chrono::milliseconds>(timeout_ / 32, std::chrono::milliseconds(1),
                                                          std::chrono::milliseconds(100));
  // A deadline seen passed is acted on a moment later, if it still stands: a process resumed after
  // a stop first takes the notice a peer sent meanwhile, and fails with the peer's reason rather
  // than a timeout of its own. Failing takes timeout + 2 ticks at most (6.25%).
  const auto grace = std::min<std::chrono::milliseconds>(tick, std::chrono::milliseconds(100));
  bool expired = false;
  Clock::time_point expired_seen{};
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    // Notices go out as soon as an abort asks for them (this thread's own included).
    changed_.wait_for(lock, expired ? grace : tick, [&] { return stopping_ || (notify_ && !told_); });
    if (stopping_) break;
    if (notify_ && !told_) {
      const std::string reason = abort_reason_;
      lock.unlock();
      tell_peers(reason);
      lock.lock();
      told_ = true;
      changed_.notify_all();
      continue;
    }
    // A call queued while the worker sleeps, that nobody waits for, is started here (the calls run on
    // the thread that waits for them: the worker is not woken for each).
    if (what_ == nullptr && !aborted_) {
      lock.unlock();
      calls_.nudge(tick);
      lock.lock();
    }
    const auto now = Clock::now();
    // A send still pending a moment after its peer's connection failed will not complete (Gloo
    // does not always fail it): it is let go, and the call fails naming the peer. The moment spares
    // a send that was completing as a peer that had all it needed closed.
    if (waiting_ != nullptr && !waiting_receive_) {
      const auto peer = static_cast<std::size_t>(waiting_peer_);
      if (!lost_[peer].empty() && now - lost_at_[peer] >= std::chrono::milliseconds(50)) waiting_->abortWaitSend();
    }
    if (what_ == nullptr || aborted_ || now < deadline_) {
      expired = false;
      continue;
    }
    if (!expired) {
      expired = true;
      expired_seen = now;
    }
    if (now - expired_seen < grace) continue;
    std::string reason = loom::detail::concat(*what_, ": ", backend::not_completed_within(timeout_));
    if (waiting_ != nullptr)
      reason += loom::detail::concat("; it was waiting ", waiting_receive_ ? "for rank " : "to send to rank ",
                                     waiting_peer_, waiting_receive_ ? "'s data" : "");
    reason += loom::detail::concat("; the ", label_, " is aborted");
    call_timed_out_ = true;
    abort_locked(ErrorCategory::timeout, reason, true);
  }
}

void GlooLink::tell_peers(const std::string& reason) {
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    auto message = std::make_shared<std::vector<char>>(std::min(reason.size(), notice_bytes - 1) + 1, '\0');
    std::memcpy(message->data(), reason.data(), message->size() - 1);
    try {
      Buffer buffer = transport_->createUnboundBuffer(message->data(), message->size());
      buffer->send(peer, notice_slot, 0, message->size());
      const std::lock_guard lock(mutex_);
      outgoing_.push_back(std::move(message));
      outgoing_buffers_.push_back(std::move(buffer));
    } catch (const std::exception&) {  // the connection to that peer is gone: it needs no notice
    }
  }
}

void GlooLink::listen(int peer) {
  // The receive is posted from each peer by name (not from any): Gloo then tells the peer at once
  // that it is posted, so a notice goes out eagerly, even to a rank that is stopped, and waits in
  // its socket.
  gloo::transport::UnboundBuffer& notice = *notice_buffers_[static_cast<std::size_t>(peer)];
  char* text = notice_.data() + static_cast<std::size_t>(peer) * notice_bytes;
  bool received = false;
  std::string lost;
  try {
    notice.recv(peer, notice_slot, 0, notice_bytes);
    received = notice.waitRecv(nullptr, forever);  // false: the destructor
  } catch (const std::exception& e) {  // the connection failed
    lost = e.what();
  }
  const std::lock_guard lock(mutex_);
  heard_[static_cast<std::size_t>(peer)] = true;
  if (!lost.empty() && !stopping_) {
    // Gloo fails the transfers pending on this connection, but not always a send the peer died
    // before reading: the watch thread lets such a send go (watch()).
    lost_[static_cast<std::size_t>(peer)] = lost;
    lost_at_[static_cast<std::size_t>(peer)] = Clock::now();
  }
  changed_.notify_all();
  if (!received) return;
  text[notice_bytes - 1] = '\0';
  abort_locked(ErrorCategory::aborted, loom::detail::concat("rank ", peer, " aborted the ", label_, ": ", text), false);
}

}  // namespace loom::comm::detail
