// tcp_all_gather_blobs: every rank's blob on every rank, built on tcp_share_blob (rendezvous.hpp).
//
//   step 1 (tcp_share_blob, authenticated when the job has a secret): rank 0 -> every rank:
//          a fresh 32-byte session key | the port of rank 0's gather listener (big-endian u32)
//   step 2, on that port: rank -> rank 0: magic | world size | rank | blob bytes | blob | tag
//          rank 0 -> rank: magic | world size | its rank | table bytes | table | tag
//          table: for every rank in order, its blob's length (u32) and bytes
// Tags are HMAC-SHA-512-256 under the session key over a label naming the direction and
// everything before the tag, so only ranks that took part in step 1 are heard, and a rank's blob
// cannot be passed off as rank 0's table (or the reverse).
#include <poll.h>
#include <sodium.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <string_view>
#include <vector>

#include "loom/comm/rendezvous.hpp"
#include "loom/crypt/key.hpp"
#include "src/comm/rendezvous_socket.hpp"

namespace loom::comm {

namespace {

using namespace rendezvous;

constexpr std::uint32_t gather_magic = 0x4C4F4F47;  // "LOOG"
constexpr std::size_t key_bytes = crypto_auth_hmacsha512256_KEYBYTES;
constexpr std::size_t tag_bytes = crypto_auth_hmacsha512256_BYTES;
constexpr std::size_t head_bytes = 16;  // four big-endian words
// How long a connection to the gather listener has to deliver a rank's proven message (all are
// served together: a silent stranger does not delay the others).
constexpr auto proof_limit = 5s;
constexpr std::string_view rank_label = "loom gather: a rank's blob";
constexpr std::string_view table_label = "loom gather: rank 0's table";

using Key = std::array<unsigned char, key_bytes>;
using Tag = std::array<unsigned char, tag_bytes>;

void put_word(std::vector<unsigned char>& out, std::uint32_t value) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<unsigned char>(value >> shift));
}

std::uint32_t get_word(const unsigned char* bytes) {
  return std::uint32_t{bytes[0]} << 24 | std::uint32_t{bytes[1]} << 16 | std::uint32_t{bytes[2]} << 8 | bytes[3];
}

Tag tag_of(const Key& key, std::string_view label, std::span<const unsigned char> message) {
  crypto_auth_hmacsha512256_state state;
  crypto_auth_hmacsha512256_init(&state, key.data(), key.size());
  crypto_auth_hmacsha512256_update(&state, reinterpret_cast<const unsigned char*>(label.data()), label.size());
  crypto_auth_hmacsha512256_update(&state, message.data(), message.size());
  Tag tag{};
  crypto_auth_hmacsha512256_final(&state, tag.data());
  return tag;
}

// magic | size | who | body length | body | tag over the label and all before it.
std::vector<unsigned char> sealed_message(const Key& key, std::string_view label, int size, int who,
                                          std::span<const unsigned char> body) {
  std::vector<unsigned char> message;
  message.reserve(head_bytes + body.size() + tag_bytes);
  put_word(message, gather_magic);
  put_word(message, static_cast<std::uint32_t>(size));
  put_word(message, static_cast<std::uint32_t>(who));
  put_word(message, static_cast<std::uint32_t>(body.size()));
  message.insert(message.end(), body.begin(), body.end());
  const Tag tag = tag_of(key, label, message);
  message.insert(message.end(), tag.begin(), tag.end());
  return message;
}

struct Received {
  std::uint32_t size = 0, who = 0;
  std::vector<unsigned char> body;
  bool proven = false;
};

// Checks a sealed message's head (its magic; a body of at most max_body bytes) and returns the
// whole message's length; an empty string when it holds, else why not.
std::string check_head(const unsigned char* head, std::size_t max_body, std::size_t& total) {
  if (get_word(head) != gather_magic) return "not a loom gather";
  const std::uint32_t length = get_word(head + 12);
  if (length > max_body) return loom::detail::concat("announces ", length, " bytes");
  total = head_bytes + length + tag_bytes;
  return {};
}

// A whole sealed message, and whether its tag holds under the key.
Received open_message(const Key& key, std::string_view label, std::span<const unsigned char> message) {
  const std::size_t length = message.size() - head_bytes - tag_bytes;
  const Tag tag = tag_of(key, label, message.first(head_bytes + length));
  Received out{get_word(message.data() + 4), get_word(message.data() + 8), {}, false};
  out.proven = sodium_memcmp(tag.data(), message.data() + head_bytes + length, tag_bytes) == 0;
  out.body.assign(message.begin() + head_bytes, message.begin() + static_cast<std::ptrdiff_t>(head_bytes + length));
  return out;
}

// Reads one sealed message from a known peer; throws on a wrong magic, an oversized body or a
// socket failure. Memory grows with the bytes that arrive, not with the length announced before
// the tag is checked.
Received read_message(const Context& ctx, int fd, const Key& key, std::string_view label, std::size_t max_body,
                      const char* from) {
  std::vector<unsigned char> message(head_bytes);
  recv_all(ctx, fd, message, from);
  std::size_t total = 0;
  if (const std::string bad = check_head(message.data(), max_body, total); !bad.empty())
    ctx.fail(ErrorCategory::corrupt_data, from, ": ", bad);
  while (message.size() < total) {
    const std::size_t have = message.size();
    message.resize(std::min(total, have + (std::size_t{1} << 16)));
    recv_all(ctx, fd, std::span(message).subspan(have), from);
  }
  return open_message(key, label, message);
}

void report_refused(const Context& ctx, const RendezvousOptions& options, const std::string& from,
                    const std::string& why) {
  const std::string line = loom::detail::concat(ctx.where, ": refused a peer from ", from, ": ", why);
  if (options.on_refused) options.on_refused(line);
  else std::fprintf(stderr, "loom: %s\n", line.c_str());
}

// Rank 0's side: every connection is read at once (poll), each given proof_limit to deliver a
// proven blob, so silent strangers cost the job nothing but a slot, and are dropped and reported.
std::vector<std::vector<unsigned char>> gather_on_rank_0(const Context& ctx, const Fd& listener, const Key& key,
                                                         std::span<const unsigned char> blob,
                                                         const RendezvousOptions& options) {
  const auto slots = static_cast<std::size_t>(ctx.size);
  std::vector<std::vector<unsigned char>> blobs(slots);
  std::vector<Fd> peers(slots);
  blobs[0].assign(blob.begin(), blob.end());
  struct Arrival {
    Fd fd;
    std::string from;
    Clock::time_point until;
    std::vector<unsigned char> bytes;
    std::size_t total = head_bytes;  // the whole message, once its head is read
  };
  std::vector<Arrival> arrivals;
  const auto refuse = [&](Arrival& arrival, const std::string& why) {
    report_refused(ctx, options, arrival.from, why);
    arrival.fd = Fd();
  };
  // A proven message: one of this job's ranks, so a disagreement is an error of the job. A second
  // message for a rank (a replay, or two processes given one RANK) is reported and dropped; a
  // duplicate process then fails on its own, with no table.
  const auto admit = [&](Arrival& arrival, Received message) {
    if (message.size != static_cast<std::uint32_t>(ctx.size))
      ctx.fail(ErrorCategory::corrupt_data, "world size mismatch: rank ", message.who, " says ", message.size);
    if (message.who == 0 || message.who >= slots)
      ctx.fail(ErrorCategory::corrupt_data, "a rank claims rank ", message.who, ", which is not a peer of rank 0");
    if (message.body.empty()) ctx.fail(ErrorCategory::corrupt_data, "rank ", message.who, " sent an empty blob");
    if (peers[message.who].get() >= 0)
      return refuse(arrival, loom::detail::concat("a second blob for rank ", message.who, " (two processes started "
                                                  "with that rank, or a replayed message)"));
    blobs[message.who] = std::move(message.body);
    peers[message.who] = std::move(arrival.fd);
  };
  std::vector<unsigned char> chunk(std::size_t{1} << 16);
  const auto gathered = [&] {
    std::size_t count = 1;
    for (const Fd& peer : peers) count += peer.get() >= 0 ? 1 : 0;
    return count;
  };
  // Connections read at once: enough for every rank twice over; more wait in the backlog, so a
  // crowd of strangers holds a bounded amount of memory and of descriptors.
  const std::size_t max_arrivals = 2 * slots + 8;
  Clock::time_point accept_again{};  // after running out of descriptors, a pause before the next accept
  for (;;) {
    if (gathered() == slots) break;
    auto wake = ctx.deadline;
    // At the cap, or out of descriptors a moment ago, the listener waits: poll it with no events.
    const bool accepting = arrivals.size() < max_arrivals && Clock::now() >= accept_again;
    if (!accepting && arrivals.size() < max_arrivals) wake = std::min(wake, accept_again);
    std::vector<pollfd> watched{{listener.get(), static_cast<short>(accepting ? POLLIN : 0), 0}};
    for (const Arrival& arrival : arrivals) {
      watched.push_back({arrival.fd.get(), POLLIN, 0});
      wake = std::min(wake, arrival.until);
    }
    if (::poll(watched.data(), watched.size(), remaining_ms(wake)) < 0 && errno != EINTR) ctx.fail_errno("poll", errno);
    const auto now = Clock::now();
    for (std::size_t i = 0; i < arrivals.size(); ++i) {
      Arrival& arrival = arrivals[i];
      if ((watched[i + 1].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
        const std::size_t want = std::min(chunk.size(), arrival.total - arrival.bytes.size());
        const ssize_t got = ::recv(arrival.fd.get(), chunk.data(), want, 0);
        if (got <= 0 && !(got < 0 && (errno == EINTR || errno == EAGAIN))) {
          refuse(arrival, "it hung up before sending a blob");
          continue;
        }
        if (got > 0) arrival.bytes.insert(arrival.bytes.end(), chunk.begin(), chunk.begin() + got);
        if (arrival.total == head_bytes && arrival.bytes.size() == head_bytes) {
          if (const std::string bad = check_head(arrival.bytes.data(), max_rendezvous_blob_bytes, arrival.total);
              !bad.empty()) {
            refuse(arrival, "its blob is " + bad);
            continue;
          }
        }
        if (arrival.bytes.size() == arrival.total) {
          Received message = open_message(key, rank_label, arrival.bytes);
          if (!message.proven) refuse(arrival, "its blob does not hold under this job's session key");
          else admit(arrival, std::move(message));
          continue;
        }
      }
      if (now >= arrival.until)
        refuse(arrival, loom::detail::concat("it sent no blob within ",
                                             std::chrono::duration_cast<std::chrono::seconds>(proof_limit).count(), " s"));
    }
    std::erase_if(arrivals, [](const Arrival& arrival) { return arrival.fd.get() < 0; });
    if (gathered() == slots) break;
    if (now >= ctx.deadline)
      ctx.timed_out("only ", gathered() - 1, " of the ", ctx.size - 1, " other ranks sent their blobs");
    while (arrivals.size() < max_arrivals && now >= accept_again) {  // the connections waiting, up to the cap
      Fd peer(::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
      if (peer.get() < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        if (errno == EMFILE || errno == ENFILE) {  // the rest stay in the backlog a moment
          accept_again = now + 50ms;
          break;
        }
        ctx.fail_errno("accept", errno);
      }
      std::string from = peer_address(peer.get());
      arrivals.push_back({std::move(peer), std::move(from), now + proof_limit, {}, head_bytes});
    }
  }
  std::vector<unsigned char> table;
  for (const auto& b : blobs) {
    put_word(table, static_cast<std::uint32_t>(b.size()));
    table.insert(table.end(), b.begin(), b.end());
  }
  for (int r = 1; r < ctx.size; ++r) {
    send_all(ctx, peers[static_cast<std::size_t>(r)].get(), sealed_message(key, table_label, ctx.size, r, table),
             "sending the table");
  }
  return blobs;
}

std::vector<std::vector<unsigned char>> parse_table(const Context& ctx, std::span<const unsigned char> table) {
  std::vector<std::vector<unsigned char>> blobs;
  std::size_t at = 0;
  while (at < table.size() && blobs.size() < static_cast<std::size_t>(ctx.size)) {
    if (table.size() - at < 4) break;
    const std::size_t length = get_word(table.data() + at);
    at += 4;
    if (length == 0 || length > table.size() - at) break;
    blobs.emplace_back(table.begin() + static_cast<std::ptrdiff_t>(at),
                       table.begin() + static_cast<std::ptrdiff_t>(at + length));
    at += length;
  }
  if (at != table.size() || blobs.size() != static_cast<std::size_t>(ctx.size))
    ctx.fail(ErrorCategory::corrupt_data, "rank 0's table does not hold ", ctx.size, " blobs");
  return blobs;
}

}  // namespace

std::vector<std::vector<unsigned char>> tcp_all_gather_blobs(const std::string& host, int port, int rank, int size,
                                                             std::span<const unsigned char> blob,
                                                             std::chrono::milliseconds timeout,
                                                             const RendezvousOptions& options) {
  const bool ipv6 = host.find(':') != std::string::npos;
  const Context ctx{loom::detail::concat("tcp gather with ", ipv6 ? "[" : "", host, ipv6 ? "]:" : ":", port), rank,
                    size, timeout};
  ctx.require(size >= 1, "the world size must be at least 1");
  ctx.require(rank >= 0 && rank < size, "the rank is outside [0, world size)");
  ctx.require(!blob.empty(), "this rank has an empty blob to share");
  ctx.require(blob.size() <= max_rendezvous_blob_bytes, "the blob is larger than max_rendezvous_blob_bytes");
  ctx.require(timeout.count() >= 0, "the timeout is negative");
  if (size == 1) return {{blob.begin(), blob.end()}};
  const auto left = [&] {
    return std::max(std::chrono::milliseconds(0),
                    std::chrono::duration_cast<std::chrono::milliseconds>(ctx.deadline - Clock::now()));
  };
  if (rank == 0) {
    crypt::ensure_sodium();
    const Fd listener = listen_on(ctx, 0);
    std::vector<unsigned char> step1(key_bytes);
    Key key{};
    randombytes_buf(key.data(), key.size());
    std::copy(key.begin(), key.end(), step1.begin());
    put_word(step1, static_cast<std::uint32_t>(bound_port(ctx, listener.get())));
    tcp_share_blob(host, port, rank, size, step1, left(), options);
    sodium_memzero(step1.data(), step1.size());
    return gather_on_rank_0(ctx, listener, key, blob, options);
  }
  std::vector<unsigned char> step1 = tcp_share_blob(host, port, rank, size, {}, left(), options);
  if (step1.size() != key_bytes + 4)
    ctx.fail(ErrorCategory::corrupt_data, "rank 0 shared ", step1.size(), " bytes, not a gather's key and port");
  Key key{};
  std::copy_n(step1.begin(), key_bytes, key.begin());
  const auto gather_port = static_cast<int>(get_word(step1.data() + key_bytes));
  sodium_memzero(step1.data(), step1.size());
  const Fd fd = connect_until_deadline(ctx, host, gather_port, "rank 0's gather listener");
  send_all(ctx, fd.get(), sealed_message(key, rank_label, size, rank, blob), "sending this rank's blob");
  const std::size_t max_table = static_cast<std::size_t>(size) * (4 + max_rendezvous_blob_bytes);
  Received answer = read_message(ctx, fd.get(), key, table_label, max_table, "receiving rank 0's table");
  if (!answer.proven)
    ctx.fail(ErrorCategory::corrupt_data, "rank 0's table does not hold under the session key: whoever answered ",
             "did not take part in the rendezvous");
  if (answer.size != static_cast<std::uint32_t>(size) || answer.who != static_cast<std::uint32_t>(rank))
    ctx.fail(ErrorCategory::corrupt_data, "rank 0's table is for rank ", answer.who, " of ", answer.size);
  std::vector<std::vector<unsigned char>> blobs = parse_table(ctx, answer.body);
  if (!std::equal(blobs[static_cast<std::size_t>(rank)].begin(), blobs[static_cast<std::size_t>(rank)].end(),
                  blob.begin(), blob.end()))
    ctx.fail(ErrorCategory::corrupt_data, "rank 0's table does not hold this rank's own blob");
  return blobs;
}

}  // namespace loom::comm
