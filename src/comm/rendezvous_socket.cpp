#include "src/comm/rendezvous_socket.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <climits>
#include <cstdint>
#include <memory>
#include <thread>
#include <utility>

namespace loom::comm::rendezvous {

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<std::chrono::milliseconds::rep>(left, 0, INT_MAX));
}

// Waits until fd is ready for `events`; false once the deadline has passed.
bool wait_ready(const Context& ctx, int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd entry{fd, events, 0};
    const int ready = ::poll(&entry, 1, remaining_ms(deadline));
    if (ready > 0) return true;
    if (ready == 0) return false;
    if (errno != EINTR) ctx.fail_errno("poll", errno);
  }
}

// Sockets are non-blocking: every send and recv waits with poll, up to the deadline.
void send_all(const Context& ctx, int fd, std::span<const unsigned char> bytes, const char* what) {
  while (!bytes.empty()) {
    const ssize_t sent = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (sent >= 0) {
      bytes = bytes.subspan(static_cast<std::size_t>(sent));
    } else if (errno != EINTR) {
      if (errno != EAGAIN && errno != EWOULDBLOCK) ctx.fail_errno(what, errno);
      if (!wait_ready(ctx, fd, POLLOUT, ctx.deadline)) ctx.timed_out(what, " did not complete");
    }
  }
}

void recv_all(const Context& ctx, int fd, std::span<unsigned char> bytes, const char* what) {
  while (!bytes.empty()) {
    const ssize_t got = ::recv(fd, bytes.data(), bytes.size(), 0);
    if (got > 0) {
      bytes = bytes.subspan(static_cast<std::size_t>(got));
    } else if (got == 0) {
      ctx.fail(ErrorCategory::io, what, ": connection closed with ", bytes.size(), " bytes missing");
    } else if (errno != EINTR) {
      if (errno != EAGAIN && errno != EWOULDBLOCK) ctx.fail_errno(what, errno);
      if (!wait_ready(ctx, fd, POLLIN, ctx.deadline)) ctx.timed_out(what, " did not complete");
    }
  }
}

// One attempt to connect to any address of host:port; an empty Fd and the reason when it fails.
Fd try_connect(const Context& ctx, const std::string& host, int port, std::string& error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); rc != 0) {
    error = rc == EAI_SYSTEM ? std::strerror(errno) : ::gai_strerror(rc);
    return Fd();
  }
  const std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> addresses(found, &::freeaddrinfo);
  for (const addrinfo* address = found; address != nullptr; address = address->ai_next) {
    Fd fd(::socket(address->ai_family, address->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, address->ai_protocol));
    if (fd.get() < 0 ||
        (::connect(fd.get(), address->ai_addr, address->ai_addrlen) != 0 && errno != EINPROGRESS && errno != EINTR)) {
      error = std::strerror(errno);
      continue;
    }
    if (!wait_ready(ctx, fd.get(), POLLOUT, ctx.deadline)) {
      error = "no answer";
      return Fd();
    }
    int status = 0;
    socklen_t length = sizeof status;
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &status, &length) != 0) status = errno;
    // With nobody listening, a local port may connect to itself (TCP simultaneous open).
    sockaddr_storage self{}, peer{};
    socklen_t self_length = sizeof self, peer_length = sizeof peer;
    if (status == 0 && ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&self), &self_length) == 0 &&
        ::getpeername(fd.get(), reinterpret_cast<sockaddr*>(&peer), &peer_length) == 0 && self_length == peer_length &&
        std::memcmp(&self, &peer, self_length) == 0) {
      status = ECONNREFUSED;
    }
    if (status == 0) return fd;
    error = std::strerror(status);
  }
  return Fd();
}

Fd listen_on(const Context& ctx, int port) {
  const auto port_bytes = htons(static_cast<std::uint16_t>(port));
  sockaddr_in6 any6{};
  any6.sin6_family = AF_INET6;
  any6.sin6_port = port_bytes;
  any6.sin6_addr = in6addr_any;
  sockaddr_in any4{};
  any4.sin_family = AF_INET;
  any4.sin_port = port_bytes;
  any4.sin_addr.s_addr = htonl(INADDR_ANY);
  // Dual-stack IPv6 first (it takes IPv4 clients too), IPv4 alone where the host has no IPv6.
  const std::pair<const sockaddr*, socklen_t> addresses[] = {{reinterpret_cast<const sockaddr*>(&any6), sizeof any6},
                                                             {reinterpret_cast<const sockaddr*>(&any4), sizeof any4}};
  int error = 0;
  for (const auto& [address, length] : addresses) {
    Fd fd(::socket(address->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    const int on = 1, off = 0;
    if (fd.get() >= 0 && ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) == 0 &&
        (address->sa_family != AF_INET6 || ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off) == 0) &&
        ::bind(fd.get(), address, length) == 0 && ::listen(fd.get(), SOMAXCONN) == 0) {
      return fd;
    }
    error = errno;
  }
  ctx.fail_errno("cannot listen on the port", error);
}

// Where a connected peer comes from, for the report of a refused one.
std::string peer_address(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  char text[INET6_ADDRSTRLEN] = "an unknown address";
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    if (address.ss_family == AF_INET)
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&address)->sin_addr, text, sizeof text);
    else if (const auto* v6 = reinterpret_cast<sockaddr_in6*>(&address); address.ss_family == AF_INET6) {
      if (IN6_IS_ADDR_V4MAPPED(&v6->sin6_addr))  // an IPv4 client of the dual-stack socket
        ::inet_ntop(AF_INET, v6->sin6_addr.s6_addr + 12, text, sizeof text);
      else
        ::inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof text);
    }
  }
  return text;
}

Fd connect_until_deadline(const Context& ctx, const std::string& host, int port, const char* whom) {
  std::string error;
  Fd fd;
  while ((fd = try_connect(ctx, host, port, error)).get() < 0) {
    if (Clock::now() >= ctx.deadline) ctx.timed_out("no connection to ", whom, " (last error: ", error, ")");
    std::this_thread::sleep_until(std::min(ctx.deadline, Clock::now() + 50ms));
  }
  return fd;
}

int bound_port(const Context& ctx, int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) ctx.fail_errno("getsockname", errno);
  const auto port = address.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&address)->sin6_port
                                                  : reinterpret_cast<sockaddr_in*>(&address)->sin_port;
  return ntohs(port);
}

}  // namespace loom::comm::rendezvous
