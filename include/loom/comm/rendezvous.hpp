// Bootstrap without MPI: rank 0's small blob (an ncclUniqueId, 128 bytes) handed to every rank of
// a job, over TCP (rank 0 listens, as with torchrun's MASTER_ADDR/MASTER_PORT) or through a file
// on a file system all ranks share. Everything sent carries a header (magic, protocol version,
// world size, blob length), so a peer from another job or a truncated file is an error, not garbage.
#pragma once

#include <chrono>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace loom::comm {

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
                                          std::span<const unsigned char> blob, std::chrono::milliseconds timeout);

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

}  // namespace loom::comm
