// Bootstrap without MPI: rank 0's small blob (an ncclUniqueId, 128 bytes) handed to every rank of
// a job, over TCP (rank 0 listens, as with torchrun's MASTER_ADDR/MASTER_PORT) or through a file
// on a file system all ranks share. Everything sent carries a header (magic, protocol version,
// world size, blob length), so a peer from another job or a truncated file is an error, not garbage.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace loom::crypt {
class SecretKey;
}

namespace loom::comm {

// A job's shared secret for the TCP rendezvous: a token (LOOM_JOB_TOKEN, at least 16 characters,
// random: whoever sees a handshake can test guesses offline, so 128 bits or more)
// or a loom key file (LOOM_KEY_FILE), from which two keys are derived (libsodium's BLAKE2b KDF):
// one authenticates the ranks' answers (HMAC-SHA-512-256 over rank 0's fresh challenge, so a
// replayed answer fails), one seals rank 0's blob (XChaCha20-Poly1305, bound to both challenges).
// Only ranks that prove they hold the secret get the blob, and they know it came from rank 0.
class RendezvousSecret {
 public:
  static RendezvousSecret from_token(std::string_view token);
  static RendezvousSecret from_key(const crypt::SecretKey& key);
  // LOOM_JOB_TOKEN, else the key file LOOM_KEY_FILE names; none when neither is set.
  static std::optional<RendezvousSecret> from_environment();
  ~RendezvousSecret();
  RendezvousSecret(RendezvousSecret&&) noexcept;
  RendezvousSecret& operator=(RendezvousSecret&&) noexcept;

  struct Keys;
  const Keys& keys() const { return *keys_; }

 private:
  explicit RendezvousSecret(const unsigned char* master);
  std::unique_ptr<Keys> keys_;
};

struct RendezvousOptions {
  // With a secret (on every rank), the TCP rendezvous is authenticated (protocol 2): rank 0 sends
  // each connecting peer a challenge at once and serves all pending handshakes together; it
  // refuses (and reports through on_refused, default: a line on stderr) a peer that does not
  // answer with the secret within 5 s, and goes on waiting for the job's ranks. Without one it is as before (protocol 1), and a rank with a secret refuses
  // a rank 0 without one, and the reverse, by name.
  const RendezvousSecret* secret = nullptr;
  std::function<void(const std::string& why)> on_refused;
};

// The largest blob either transport carries; a header that announces more is corrupt data.
inline constexpr std::size_t max_rendezvous_blob_bytes = std::size_t{1} << 20;

// Returns rank 0's blob on every rank of a job of `size` ranks (rank 0 gets its own back). `blob`
// is only read on rank 0; the others pass an empty span. With size 1 the blob comes straight back:
// nothing is sent, and host and port are neither used nor checked.
//
// Rank 0 listens on `port` on all interfaces (IPv6 and IPv4, SO_REUSEADDR) and accepts the size-1
// other ranks; each gets the blob and answers with its own world size and rank. The others resolve
// host:port (getaddrinfo) and connect, retrying until the timeout, since rank 0 may start later.
// Every wait (connect, accept, send, recv) ends at the deadline; only name resolution itself is
// not bounded by it.
//
// Errors (loom::Error, with the rank): invalid_argument for rank outside [0, size), size < 1, port
// outside 1..65535, an empty host, an empty or oversized blob on rank 0, a negative timeout;
// timeout when rank 0 or the other ranks do not show up in time; corrupt_data for a peer that is
// not a rendezvous of this job (wrong magic or protocol version, a different world size, a
// duplicate or impossible rank); io for socket failures (the port in use, a dropped connection).
std::vector<unsigned char> tcp_share_blob(const std::string& host, int port, int rank, int size,
                                          std::span<const unsigned char> blob, std::chrono::milliseconds timeout,
                                          const RendezvousOptions& options = {});

// Rank 0 writes `path` atomically (a temporary next to it, then rename) and returns without waiting
// for readers, so it never times out; the others poll until the file appears and read it. The path
// must be fresh for each job (e.g. named after the job id): a file left behind by an earlier job of
// the same world size cannot be told apart. Nobody removes the file; that is the caller's choice.
// With size 1 nothing is written and the path is neither used nor checked.
//
// Errors as for tcp_share_blob, with the path instead of host:port: invalid_argument (an empty path
// instead of host and port), timeout when the file does not appear in time, corrupt_data for a file
// that is not a rendezvous file of this job (wrong magic, version or world size, truncated), io
// for file system failures.
std::vector<unsigned char> file_share_blob(const std::string& path, int rank, int size,
                                           std::span<const unsigned char> blob, std::chrono::milliseconds timeout);

// Every rank's blob on every rank, in rank order (each rank passes its own, non-empty): the
// bootstrap of a backend whose ranks connect to each other (Gloo's pairs), the part of a key-value
// store such a backend needs.
//
// Over TCP, in two steps on host:port. First tcp_share_blob (authenticated by options.secret as
// always) hands every rank a fresh 32-byte session key and the port of a second listener rank 0
// has opened for this gather. Then each rank connects there and sends its blob with an HMAC under
// the session key, and rank 0, once it holds every blob, answers each rank with the table under
// the same key. A connection that does not prove the key within 5 s is dropped and reported (as
// tcp_share_blob reports a refused peer), and rank 0 goes on waiting. Errors as for tcp_share_blob.
std::vector<std::vector<unsigned char>> tcp_all_gather_blobs(const std::string& host, int port, int rank, int size,
                                                             std::span<const unsigned char> blob,
                                                             std::chrono::milliseconds timeout,
                                                             const RendezvousOptions& options = {});

// Through files: rank r writes `path`.r as file_share_blob writes `path`, and reads every other
// rank's. The same freshness rule holds for the path; nobody removes the files.
std::vector<std::vector<unsigned char>> file_all_gather_blobs(const std::string& path, int rank, int size,
                                                              std::span<const unsigned char> blob,
                                                              std::chrono::milliseconds timeout);

}  // namespace loom::comm
