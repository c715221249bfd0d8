// One Gloo communicator's connections, and how its running call waits on them.
//
// Gloo's own waits end a timeout by closing every connection of the context, which leaves no way
// to tell the peers why. So loom waits itself: the running call registers the transfer it waits
// for (peer and direction), and this link's watch thread, at the call's deadline (its start plus
// the timeout; seen twice, a moment apart, so that a process resumed after a stop first takes the
// notices that came meanwhile), interrupts that wait (Gloo's abortWaitRecv/abortWaitSend), fails the call with an
// Error naming it and the peer it was waiting for, and sends the reason to every peer on a slot of
// its own. A receive stays posted on that slot from every peer, each in a buffer of its own with
// a thread waiting on it (a failed connection fails every transfer of a buffer for good, so one
// buffer for all peers would stop hearing the others once one of them is gone): a notice aborts
// this communicator with the peer's reason, so a rank still coming to the call (or resuming after
// a stop) fails at once instead of waiting out its own timeout. A peer whose process ends closes
// its connections: the waits on it throw at once, and the call fails naming the peer.
//
// The watch thread also starts a call nobody has waited for (CallQueue::Handle::nudge), as the MPI
// backend's status thread does.
//
// After an abort, transfers may still be posted into the running call's memory: the link owns the
// call's Gloo buffers, and keeps them and that memory (the call's tensors and the scratch) until it
// is destroyed. Gloo's connections refer to a buffer only weakly; one freed under a posted transfer
// would leave the connection's reader stuck on it, and no later message (a notice) would arrive.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "loom/comm/backend/call_queue.hpp"
#include "loom/core/error.hpp"

namespace gloo::transport {
class Context;
class UnboundBuffer;
}  // namespace gloo::transport

namespace loom::comm::detail {

// Message slots: a collective's transfers carry its number and its step; point-to-point messages
// the count of messages between the two ranks; notices one slot.
std::uint64_t collective_slot(std::int64_t collective, int step);
std::uint64_t point_to_point_slot(std::int64_t message, bool payload);

class GlooLink {
 public:
  using Buffer = std::unique_ptr<gloo::transport::UnboundBuffer>;

  // transport: a connected full mesh; label: the communicator's name in messages ("Gloo communicator").
  GlooLink(std::shared_ptr<gloo::transport::Context> transport, std::chrono::milliseconds timeout,
           backend::CallQueue::Handle calls, std::string label);
  ~GlooLink();
  GlooLink(const GlooLink&) = delete;
  GlooLink& operator=(const GlooLink&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::shared_ptr<gloo::transport::Context>& transport() const { return transport_; }

  // The running call (on the thread that runs it): its deadline starts now; `what` names it.
  void begin(const std::string* what);
  void end();

  // A buffer over `bytes` at `data` for the running call's transfers, owned by the link until the
  // call ends (kept for good if the call was aborted).
  gloo::transport::UnboundBuffer& buffer(const void* data, std::size_t bytes);
  // Post a transfer; a failed connection throws as a wait does.
  void send(gloo::transport::UnboundBuffer& buffer, int peer, std::uint64_t slot, std::size_t offset,
            std::size_t bytes);
  void recv(gloo::transport::UnboundBuffer& buffer, int peer, std::uint64_t slot, std::size_t offset,
            std::size_t bytes);
  // Wait for one posted send (or recv) of `buffer` to (from) `peer` to complete. Throws the abort
  // (a timeout naming the peer, a peer's notice) or, when the connection to the peer fails, an io
  // Error naming the peer, which aborts the communicator.
  void wait_send(gloo::transport::UnboundBuffer& buffer, int peer);
  void wait_recv(gloo::transport::UnboundBuffer& buffer, int peer);

  // Memory a call's pending transfers may still reach, kept for good when the call is aborted.
  void hold(std::shared_ptr<void> memory);

  bool aborted() const;
  // The running call passed its deadline and this link aborted for it (its peers were told it
  // failed): it fails even if its last transfer then completed.
  bool call_timed_out() const;
  [[noreturn]] void throw_aborted() const;
  // Aborts from this rank (an error in a call, or Communicator::abort): the running call fails with
  // `reason`, queued and later calls too, and the peers are told (this waits up to 250 ms for the
  // notices to leave).
  void abort(ErrorCategory category, const std::string& reason);

 private:
  void wait(gloo::transport::UnboundBuffer& buffer, int peer, bool receiving);
  // Throws the abort if there was one, else aborts with an io Error naming the peer and throws it.
  [[noreturn]] void connection_failed(int peer, bool receiving, const std::string& failure);
  void watch();
  void listen(int peer);
  // Stops and joins the watch and listener threads started so far.
  void stop_threads();
  // Under mutex_: the first abort wins. Interrupts the registered wait; notices go out from the watch thread.
  void abort_locked(ErrorCategory category, const std::string& reason, bool tell_peers);
  void tell_peers(const std::string& reason);
  // Waits (250 ms at most) until the notices posted so far have left. Gloo's own timed waits are
  // not used: one that times out closes every connection.
  void deliver_notices();

  std::shared_ptr<gloo::transport::Context> transport_;
  int rank_, size_;
  std::chrono::milliseconds timeout_;
  backend::CallQueue::Handle calls_;
  std::string label_;

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  const std::string* what_ = nullptr;
  std::chrono::steady_clock::time_point deadline_{};
  gloo::transport::UnboundBuffer* waiting_ = nullptr;  // the wait in progress, for the watch thread
  int waiting_peer_ = -1;
  bool waiting_receive_ = false;
  bool aborted_ = false, stopping_ = false;
  bool notify_ = false;  // the peers are to be told (by the watch thread)
  bool told_ = false;
  bool call_timed_out_ = false;  // the abort was the running call's own deadline
  ErrorCategory abort_category_ = ErrorCategory::timeout;
  std::string abort_reason_;
  std::vector<std::shared_ptr<void>> held_;
  std::vector<Buffer> call_buffers_;  // the running call's (its thread alone touches them)
  std::vector<Buffer> kept_buffers_;  // of aborted calls: transfers may still be posted

  std::vector<char> notice_;  // what the peers' notices land in, notice_bytes each
  std::vector<Buffer> notice_buffers_;  // one per peer (none for this rank)
  std::vector<std::shared_ptr<std::vector<char>>> outgoing_;  // notices sent (their memory)
  std::vector<Buffer> outgoing_buffers_;
  std::size_t delivered_ = 0;  // outgoing_buffers_ waited for
  std::thread watcher_;
  std::vector<std::thread> listeners_;  // one per peer
  std::vector<bool> heard_;  // per peer, under mutex_: its listener has ended (a notice, or the connection failed)
  // Per peer, under mutex_: why its connection failed, as its listener learned it ("" while it
  // holds). Gloo does not always fail a send pending on a connection that closes (a peer killed
  // while it still had our data to read), so the listener ends such a wait itself.
  std::vector<std::string> lost_;
  std::vector<std::chrono::steady_clock::time_point> lost_at_;  // when lost_ was learned
};

}  // namespace loom::comm::detail
