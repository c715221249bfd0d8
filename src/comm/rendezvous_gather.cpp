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
// How long a connection to the gather listener has to deliver a rank's proven message.
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

// Reads one sealed message (a body of at most max_body bytes); throws on a wrong magic, an
// oversized body or a socket failure, and says whether the tag holds.
Received read_message(const Context& ctx, int fd, const Key& key, std::string_view label, std::size_t max_body,
                      const char* from) {
  std::vector<unsigned char> message(head_bytes);
  recv_all(ctx, fd, message, from);
  if (get_word(message.data()) != gather_magic) ctx.fail(ErrorCategory::corrupt_data, from, ": not a loom gather");
  Received out{get_word(message.data() + 4), get_word(message.data() + 8), {}, false};
  const std::uint32_t length = get_word(message.data() + 12);
  if (length > max_body) ctx.fail(ErrorCategory::corrupt_data, from, ": announces ", length, " bytes");
  message.resize(head_bytes + length + tag_bytes);
  recv_all(ctx, fd, std::span(message).subspan(head_bytes), from);
  const std::span<const unsigned char> signed_part(message.data(), head_bytes + length);
  const Tag tag = tag_of(key, label, signed_part);
  out.proven = sodium_memcmp(tag.data(), message.data() + head_bytes + length, tag_bytes) == 0;
  out.body.assign(message.begin() + head_bytes, message.begin() + static_cast<std::ptrdiff_t>(head_bytes + length));
  return out;
}

void report_refused(const Context& ctx, const RendezvousOptions& options, const std::string& from,
                    const std::string& why) {
  const std::string line = loom::detail::concat(ctx.where, ": refused a peer from ", from, ": ", why);
  if (options.on_refused) options.on_refused(line);
  else std::fprintf(stderr, "loom: %s\n", line.c_str());
}

std::vector<std::vector<unsigned char>> gather_on_rank_0(const Context& ctx, const Fd& listener, const Key& key,
                                                         std::span<const unsigned char> blob,
                                                         const RendezvousOptions& options) {
  const auto slots = static_cast<std::size_t>(ctx.size);
  std::vector<std::vector<unsigned char>> blobs(slots);
  std::vector<Fd> peers(slots);
  blobs[0].assign(blob.begin(), blob.end());
  for (int gathered = 1; gathered < ctx.size;) {
    if (!wait_ready(ctx, listener.get(), POLLIN, ctx.deadline))
      ctx.timed_out("only ", gathered - 1, " of the ", ctx.size - 1, " other ranks sent their blobs");
    Fd peer(::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (peer.get() < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED) continue;
      ctx.fail_errno("accept", errno);
    }
    const std::string from = peer_address(peer.get());
    Context limited = ctx;  // a silent stranger costs at most proof_limit
    limited.deadline = std::min(ctx.deadline, Clock::now() + proof_limit);
    Received message;
    try {
      message = read_message(limited, peer.get(), key, rank_label, max_rendezvous_blob_bytes, "a rank's blob");
    } catch (const Error& e) {
      report_refused(ctx, options, from, e.detail());
      continue;
    }
    if (!message.proven) {
      report_refused(ctx, options, from, "its blob does not hold under this job's session key");
      continue;
    }
    // Proven: one of this job's ranks, so a disagreement is an error of the job.
    if (message.size != static_cast<std::uint32_t>(ctx.size))
      ctx.fail(ErrorCategory::corrupt_data, "world size mismatch: rank ", message.who, " says ", message.size);
    if (message.who == 0 || message.who >= slots || peers[message.who].get() >= 0)
      ctx.fail(ErrorCategory::corrupt_data, "a rank claims rank ", message.who,
               message.who == 0 || message.who >= slots ? ", which is not a peer of rank 0" : ", which already sent");
    if (message.body.empty()) ctx.fail(ErrorCategory::corrupt_data, "rank ", message.who, " sent an empty blob");
    blobs[message.who] = std::move(message.body);
    peers[message.who] = std::move(peer);
    ++gathered;
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
