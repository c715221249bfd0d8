#include "loom/comm/rendezvous.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>
#include <utility>

#include "loom/core/error.hpp"
#include "src/comm/rendezvous_auth.hpp"
#include "src/comm/rendezvous_socket.hpp"

namespace loom::comm {

namespace {

using namespace rendezvous;

constexpr std::uint32_t magic = 0x4C4F4F4D;  // "LOOM"
constexpr std::uint32_t protocol_version = 1;                // without a job secret
constexpr std::uint32_t authenticated_protocol_version = 2;  // with one (rendezvous_auth.hpp)
// How long a connecting peer has to prove it holds the job's secret before rank 0 drops it.
constexpr auto handshake_limit = 5s;

// Four big-endian words: magic, protocol version, world size, then the blob length (from rank 0)
// or the sender's rank (the answer of every other rank over TCP).
constexpr std::size_t header_bytes = 16;
using Header = std::array<unsigned char, header_bytes>;

Header make_header(int size, std::size_t last, std::uint32_t version = protocol_version) {
  const std::uint32_t words[4] = {magic, version, static_cast<std::uint32_t>(size), static_cast<std::uint32_t>(last)};
  Header header{};
  for (std::size_t i = 0; i < header_bytes; ++i)
    header[i] = static_cast<unsigned char>(words[i / 4] >> (24 - 8 * (i % 4)));
  return header;
}

std::uint32_t word(const unsigned char* header, std::size_t index) {
  std::uint32_t value = 0;
  for (std::size_t i = 0; i < 4; ++i) value = value << 8 | header[4 * index + i];
  return value;
}

// Checks the first three words of a header (`from` names its sender) and returns the fourth.
std::uint32_t check_header(const Context& ctx, const unsigned char* header, const char* from,
                           std::uint32_t version = protocol_version) {
  if (word(header, 0) != magic) ctx.fail(ErrorCategory::corrupt_data, from, " is not a loom rendezvous (wrong magic)");
  if (word(header, 1) != version) {
    const bool secrets_differ = (word(header, 1) == authenticated_protocol_version) != (version == authenticated_protocol_version);
    if (secrets_differ && version == protocol_version)
      ctx.fail(ErrorCategory::invalid_argument, from, " requires a job secret and this rank has none: set the same ",
               "LOOM_JOB_TOKEN (or LOOM_KEY_FILE) on every rank");
    if (secrets_differ)
      ctx.fail(ErrorCategory::invalid_argument, from, " has no job secret but this rank has one (LOOM_JOB_TOKEN or ",
               "LOOM_KEY_FILE): set the same secret on every rank, or none; its blob is refused");
    ctx.fail(ErrorCategory::corrupt_data, from, " speaks rendezvous protocol ", word(header, 1), ", this rank ",
             version);
  }
  if (word(header, 2) != static_cast<std::uint32_t>(ctx.size))
    ctx.fail(ErrorCategory::corrupt_data, "world size mismatch: ", from, " says ", word(header, 2), ", this rank says ",
             ctx.size);
  return word(header, 3);
}

// The ranks a rank 0 has admitted: each once, none of them rank 0.
void admit(const Context& ctx, std::vector<bool>& seen, std::uint32_t peer_rank) {
  if (peer_rank == 0 || peer_rank >= seen.size() || seen[peer_rank])
    ctx.fail(
        ErrorCategory::corrupt_data, "a connecting rank claims rank ", peer_rank,
        peer_rank == 0 || peer_rank >= seen.size() ? ", which is not a peer of rank 0" : ", which already connected");
  seen[peer_rank] = true;
}

// Protocol 2, rank 0's side. Every connection gets a fresh challenge at once, and all pending
// handshakes are served together (poll), each with its own handshake_limit: a stranger that
// connects and stays silent costs the job nothing but a slot, and is dropped and reported.
std::vector<unsigned char> serve_authenticated(const Context& ctx, const Fd& listener, std::span<const unsigned char> blob,
                                               const RendezvousOptions& options) {
  const RendezvousSecret::Keys& keys = options.secret->keys();
  constexpr std::size_t answer_bytes = header_bytes + detail::challenge_bytes + detail::answer_tag_bytes;
  struct Pending {
    Fd fd;
    std::string from;
    Clock::time_point deadline;
    detail::Challenge root;
    std::array<unsigned char, answer_bytes> answer{};
    std::size_t got = 0;
  };
  std::vector<Pending> pending;
  std::vector<bool> seen(static_cast<std::size_t>(ctx.size), false);
  const auto refuse = [&](Pending& peer, const std::string& why) {
    const std::string line = loom::detail::concat(ctx.where, ": refused a peer from ", peer.from, ": ", why);
    if (options.on_refused) options.on_refused(line);
    else std::fprintf(stderr, "loom: %s\n", line.c_str());
    peer.fd = Fd();
  };
  const Header challenge_header = make_header(ctx.size, 0, authenticated_protocol_version);
  for (int connected = 1; connected < ctx.size;) {
    auto wake = ctx.deadline;
    std::vector<pollfd> watched{{listener.get(), POLLIN, 0}};
    for (const Pending& peer : pending) {
      watched.push_back({peer.fd.get(), POLLIN, 0});
      wake = std::min(wake, peer.deadline);
    }
    if (::poll(watched.data(), watched.size(), remaining_ms(wake)) < 0 && errno != EINTR) ctx.fail_errno("poll", errno);
    const auto now = Clock::now();
    for (std::size_t i = 0; i < pending.size(); ++i) {
      Pending& peer = pending[i];
      if ((watched[i + 1].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
        const ssize_t got = ::recv(peer.fd.get(), peer.answer.data() + peer.got, answer_bytes - peer.got, 0);
        if (got <= 0 && !(got < 0 && (errno == EINTR || errno == EAGAIN))) {
          refuse(peer, "it hung up before answering the challenge");
          continue;
        }
        if (got > 0) peer.got += static_cast<std::size_t>(got);
      }
      if (peer.got >= header_bytes && word(peer.answer.data(), 0) != magic) {
        refuse(peer, "it is not a loom rendezvous (wrong magic)");
      } else if (peer.got >= header_bytes && word(peer.answer.data(), 1) != authenticated_protocol_version) {
        refuse(peer, loom::detail::concat("it speaks protocol ", word(peer.answer.data(), 1), ": it has no job secret"));
      } else if (peer.got == answer_bytes) {
        const std::span<const unsigned char> header(peer.answer.data(), header_bytes);
        detail::Challenge theirs{};
        detail::Tag tag{};
        std::memcpy(theirs.data(), peer.answer.data() + header_bytes, theirs.size());
        std::memcpy(tag.data(), peer.answer.data() + header_bytes + theirs.size(), tag.size());
        if (!detail::answer_holds(keys, peer.root, theirs, header, tag)) {
          const Header refusal = make_header(ctx.size, detail::refused_marker, authenticated_protocol_version);
          (void)::send(peer.fd.get(), refusal.data(), refusal.size(), MSG_NOSIGNAL);  // a courtesy: it may be gone
          refuse(peer, "its answer does not hold under the job's secret (another secret, or a replayed answer)");
          continue;
        }
        // Proven: one of the job's ranks, so a size or rank it disagrees on is an error of the job.
        admit(ctx, seen, check_header(ctx, peer.answer.data(), "a connecting rank", authenticated_protocol_version));
        const Header reply = make_header(ctx.size, blob.size() + detail::seal_nonce_bytes + detail::seal_overhead_bytes,
                                         authenticated_protocol_version);
        send_all(ctx, peer.fd.get(), reply, "sending the header");
        send_all(ctx, peer.fd.get(), detail::seal_blob(keys, peer.root, theirs, reply, blob), "sending the sealed blob");
        peer.fd = Fd();
        ++connected;
      } else if (now >= peer.deadline) {
        refuse(peer, loom::detail::concat("it did not answer the challenge within ",
                                          std::chrono::duration_cast<std::chrono::seconds>(handshake_limit).count(), " s"));
      }
    }
    std::erase_if(pending, [](const Pending& peer) { return peer.fd.get() < 0; });
    if (connected == ctx.size) break;
    if (now >= ctx.deadline) ctx.timed_out("only ", connected - 1, " of the ", ctx.size - 1, " other ranks connected");
    for (;;) {  // every connection waiting, each challenged at once
      Fd peer(::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
      if (peer.get() < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        ctx.fail_errno("accept", errno);
      }
      Pending fresh{std::move(peer), "", now + handshake_limit, detail::fresh_challenge()};
      fresh.from = peer_address(fresh.fd.get());
      std::array<unsigned char, header_bytes + detail::challenge_bytes> challenge{};
      std::memcpy(challenge.data(), challenge_header.data(), header_bytes);
      std::memcpy(challenge.data() + header_bytes, fresh.root.data(), fresh.root.size());
      // A fresh socket's buffer takes 48 bytes at once; one that does not is refused.
      if (::send(fresh.fd.get(), challenge.data(), challenge.size(), MSG_NOSIGNAL) !=
          static_cast<ssize_t>(challenge.size())) {
        refuse(fresh, "the challenge could not be sent to it");
        continue;
      }
      pending.push_back(std::move(fresh));
    }
  }
  return {blob.begin(), blob.end()};
}

std::vector<unsigned char> serve(const Context& ctx, int port, std::span<const unsigned char> blob,
                                 const RendezvousOptions& options) {
  const Fd listener = listen_on(ctx, port);
  if (options.secret != nullptr) return serve_authenticated(ctx, listener, blob, options);
  const Header header = make_header(ctx.size, blob.size());
  std::vector<bool> seen(static_cast<std::size_t>(ctx.size), false);
  for (int connected = 1; connected < ctx.size;) {
    if (!wait_ready(ctx, listener.get(), POLLIN, ctx.deadline))
      ctx.timed_out("only ", connected - 1, " of the ", ctx.size - 1, " other ranks connected");
    const Fd peer(::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (peer.get() < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED) continue;
      ctx.fail_errno("accept", errno);
    }
    send_all(ctx, peer.get(), header, "sending the header");
    send_all(ctx, peer.get(), blob, "sending the blob");
    Header answer{};
    recv_all(ctx, peer.get(), answer, "receiving a rank's answer");
    admit(ctx, seen, check_header(ctx, answer.data(), "a connecting rank"));
    ++connected;
  }
  return {blob.begin(), blob.end()};
}

// Protocol 2, a rank's side once connected: answers rank 0's challenge and opens its sealed blob.
std::vector<unsigned char> fetch_authenticated(const Context& ctx, int fd, const RendezvousSecret::Keys& keys) {
  Header challenge_header{};
  recv_all(ctx, fd, challenge_header, "receiving rank 0's challenge");
  check_header(ctx, challenge_header.data(), "rank 0", authenticated_protocol_version);
  detail::Challenge root{};
  recv_all(ctx, fd, root, "receiving rank 0's challenge");
  const detail::Challenge mine = detail::fresh_challenge();
  const Header answer = make_header(ctx.size, static_cast<std::size_t>(ctx.rank), authenticated_protocol_version);
  send_all(ctx, fd, answer, "sending this rank's answer");
  send_all(ctx, fd, mine, "sending this rank's answer");
  send_all(ctx, fd, detail::answer_tag(keys, root, mine, answer), "sending this rank's answer");
  Header reply{};
  recv_all(ctx, fd, reply, "receiving rank 0's reply");
  const std::uint32_t length = check_header(ctx, reply.data(), "rank 0", authenticated_protocol_version);
  if (length == detail::refused_marker)
    ctx.fail(ErrorCategory::invalid_argument, "rank 0 refused this rank: its job secret (LOOM_JOB_TOKEN or ",
             "LOOM_KEY_FILE) differs from rank 0's");
  const std::size_t overhead = detail::seal_nonce_bytes + detail::seal_overhead_bytes;
  if (length <= overhead || length > max_rendezvous_blob_bytes + overhead)
    ctx.fail(ErrorCategory::corrupt_data, "rank 0 announces a sealed blob of ", length, " bytes");
  std::vector<unsigned char> sealed(length);
  recv_all(ctx, fd, sealed, "receiving the sealed blob from rank 0");
  std::optional<std::vector<unsigned char>> blob = detail::open_blob(keys, root, mine, reply, sealed);
  if (!blob)
    ctx.fail(ErrorCategory::corrupt_data, "rank 0's sealed blob does not open under this rank's job secret: ",
             "whoever answered does not hold it");
  return std::move(*blob);
}

std::vector<unsigned char> fetch(const Context& ctx, const std::string& host, int port,
                                 const RendezvousOptions& options) {
  const Fd fd = connect_until_deadline(ctx, host, port, "rank 0");
  if (options.secret != nullptr) return fetch_authenticated(ctx, fd.get(), options.secret->keys());
  send_all(ctx, fd.get(), make_header(ctx.size, static_cast<std::size_t>(ctx.rank)), "sending this rank's answer");
  Header header{};
  recv_all(ctx, fd.get(), header, "receiving the header from rank 0");
  const std::uint32_t length = check_header(ctx, header.data(), "rank 0");
  if (length == 0 || length > max_rendezvous_blob_bytes)
    ctx.fail(ErrorCategory::corrupt_data, "rank 0 announces a blob of ", length, " bytes");
  std::vector<unsigned char> blob(length);
  recv_all(ctx, fd.get(), blob, "receiving the blob from rank 0");
  return blob;
}

void write_all(const Context& ctx, int fd, std::span<const unsigned char> bytes, const char* what) {
  while (!bytes.empty()) {
    const ssize_t written = ::write(fd, bytes.data(), bytes.size());
    if (written >= 0) {
      bytes = bytes.subspan(static_cast<std::size_t>(written));
    } else if (errno != EINTR) {
      ctx.fail_errno(what, errno);
    }
  }
}

void publish(const Context& ctx, const std::string& path, std::span<const unsigned char> blob) {
  const Header header = make_header(ctx.size, blob.size());
  const std::string temporary = path + ".tmp." + std::to_string(::getpid());
  Fd fd(::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (fd.get() < 0) ctx.fail_errno(("cannot create '" + temporary + "'").c_str(), errno);
  try {
    write_all(ctx, fd.get(), header, "cannot write the temporary file");
    write_all(ctx, fd.get(), blob, "cannot write the temporary file");
    if (::close(fd.release()) != 0) ctx.fail_errno("cannot write the temporary file", errno);  // NFS reports here
    if (::rename(temporary.c_str(), path.c_str()) != 0) ctx.fail_errno("cannot rename the temporary file", errno);
  } catch (...) {
    ::unlink(temporary.c_str());
    throw;
  }
}

std::vector<unsigned char> read_published(const Context& ctx, const std::string& path, int writer = 0) {
  Fd fd;
  while ((fd = Fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC))).get() < 0) {
    if (errno != ENOENT && errno != EINTR) ctx.fail_errno("cannot open the file", errno);
    if (Clock::now() >= ctx.deadline) ctx.timed_out("rank ", writer, " did not write the file");
    std::this_thread::sleep_until(std::min(ctx.deadline, Clock::now() + 10ms));
  }
  std::vector<unsigned char> bytes(header_bytes + max_rendezvous_blob_bytes + 1);
  std::size_t total = 0;
  for (ssize_t got = 1; got != 0 && total < bytes.size();) {
    got = ::read(fd.get(), bytes.data() + total, bytes.size() - total);
    if (got > 0) {
      total += static_cast<std::size_t>(got);
    } else if (got < 0 && errno != EINTR) {
      ctx.fail_errno("cannot read the file", errno);
    }
  }
  if (total < header_bytes)
    ctx.fail(ErrorCategory::corrupt_data, "the file holds ", total, " bytes, less than a header");
  const std::uint32_t length = check_header(ctx, bytes.data(), "the file");
  if (length == 0 || length != total - header_bytes)
    ctx.fail(ErrorCategory::corrupt_data, "the header announces a blob of ", length, " bytes but the file holds ",
             total - header_bytes, " (truncated?)");
  return {bytes.begin() + header_bytes, bytes.begin() + static_cast<std::ptrdiff_t>(total)};
}

// Checks what both transports share; true when there is a peer to talk to.
bool check_common(const Context& ctx, std::span<const unsigned char> blob) {
  ctx.require(ctx.size >= 1, "the world size must be at least 1");
  ctx.require(ctx.rank >= 0 && ctx.rank < ctx.size, "the rank is outside [0, world size)");
  ctx.require(ctx.rank != 0 || !blob.empty(), "rank 0 has an empty blob to share");
  ctx.require(blob.size() <= max_rendezvous_blob_bytes, "the blob is larger than max_rendezvous_blob_bytes");
  ctx.require(ctx.timeout.count() >= 0, "the timeout is negative");
  return ctx.size > 1;
}

}  // namespace

std::vector<unsigned char> tcp_share_blob(const std::string& host, int port, int rank, int size,
                                          std::span<const unsigned char> blob, std::chrono::milliseconds timeout,
                                          const RendezvousOptions& options) {
  const bool ipv6 = host.find(':') != std::string::npos;
  const Context ctx{loom::detail::concat("tcp rendezvous with ", ipv6 ? "[" : "", host, ipv6 ? "]:" : ":", port), rank,
                    size, timeout};
  if (!check_common(ctx, blob)) return {blob.begin(), blob.end()};
  ctx.require(!host.empty(), "the host is empty");
  ctx.require(port >= 1 && port <= 65535, "the port is outside 1..65535");
  return rank == 0 ? serve(ctx, port, blob, options) : fetch(ctx, host, port, options);
}

std::vector<unsigned char> file_share_blob(const std::string& path, int rank, int size,
                                           std::span<const unsigned char> blob, std::chrono::milliseconds timeout) {
  const Context ctx{"file rendezvous at '" + path + "'", rank, size, timeout};
  if (!check_common(ctx, blob)) return {blob.begin(), blob.end()};
  ctx.require(!path.empty(), "the path is empty");
  if (rank != 0) return read_published(ctx, path);
  publish(ctx, path, blob);
  return {blob.begin(), blob.end()};
}

std::vector<std::vector<unsigned char>> file_all_gather_blobs(const std::string& path, int rank, int size,
                                                              std::span<const unsigned char> blob,
                                                              std::chrono::milliseconds timeout) {
  const Context ctx{"file rendezvous at '" + path + ".*'", rank, size, timeout};
  ctx.require(!blob.empty(), "this rank has an empty blob to share");
  if (!check_common(ctx, blob)) return {{blob.begin(), blob.end()}};
  ctx.require(!path.empty(), "the path is empty");
  const auto path_of = [&](int r) { return path + "." + std::to_string(r); };
  publish(ctx, path_of(rank), blob);
  std::vector<std::vector<unsigned char>> blobs(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) {
    if (r == rank) {
      blobs[static_cast<std::size_t>(r)].assign(blob.begin(), blob.end());
      continue;
    }
    Context from = ctx;  // the same deadline for every file
    from.where = "file rendezvous at '" + path_of(r) + "'";
    blobs[static_cast<std::size_t>(r)] = read_published(from, path_of(r), r);
  }
  return blobs;
}

}  // namespace loom::comm
