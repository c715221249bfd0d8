// The sockets and deadlines of loom's rendezvous (rendezvous.cpp shares rank 0's blob,
// rendezvous_gather.cpp gathers every rank's): non-blocking TCP sockets, every wait bounded by the
// rendezvous' deadline, and errors that name the rendezvous and the rank.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstring>
#include <span>
#include <string>

#include "loom/core/error.hpp"
#include "src/core/unique_fd.hpp"

namespace loom::comm::rendezvous {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using loom::detail::Fd;

// Names the rendezvous in every message and the rank in every error (ranks may be threads, so the
// launcher's rank is not the right one).
struct Context {
  std::string where;  // "tcp rendezvous with host:port" or "file rendezvous at 'path'"
  int rank;
  int size;
  std::chrono::milliseconds timeout;
  // Capped so that milliseconds::max() ("wait for ever") does not overflow the clock.
  Clock::time_point deadline = Clock::now() + std::min<std::chrono::milliseconds>(timeout, 24h * 365);

  template <class... Parts>
  [[noreturn]] void fail(ErrorCategory category, const Parts&... parts) const {
    throw Error(category, loom::detail::concat(where, ": ", parts...), rank);
  }
  [[noreturn]] void fail_errno(const char* what, int error) const {
    fail(ErrorCategory::io, what, ": ", std::strerror(error));
  }
  template <class... Parts>
  [[noreturn]] void timed_out(const Parts&... parts) const {
    fail(ErrorCategory::timeout, "gave up after ", timeout.count(), " ms: ", parts...);
  }
  void require(bool ok, const char* what) const {
    if (!ok) fail(ErrorCategory::invalid_argument, what, " (rank ", rank, " of a world of ", size, ")");
  }
};


int remaining_ms(Clock::time_point deadline);
// Waits until fd is ready for `events`; false once the deadline has passed.
bool wait_ready(const Context& ctx, int fd, short events, Clock::time_point deadline);
// Sockets are non-blocking: every send and recv waits with poll, up to the deadline.
void send_all(const Context& ctx, int fd, std::span<const unsigned char> bytes, const char* what);
void recv_all(const Context& ctx, int fd, std::span<unsigned char> bytes, const char* what);
// One attempt to connect to any address of host:port; an empty Fd and the reason when it fails.
Fd try_connect(const Context& ctx, const std::string& host, int port, std::string& error);
// Connects to host:port, retrying every 50 ms until the deadline.
Fd connect_until_deadline(const Context& ctx, const std::string& host, int port, const char* whom);
// Listens on `port` on all interfaces (0: a port the system picks; bound_port says which).
Fd listen_on(const Context& ctx, int port);
int bound_port(const Context& ctx, int fd);
// Where a connected peer comes from, for the report of a refused one.
std::string peer_address(int fd);

}  // namespace loom::comm::rendezvous
