// loom's one error model: every failure is a loom::Error with a category and a message that names
// the offending values (and the rank, when the process was started by a launcher).
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace loom {

enum class ErrorCategory {
  invalid_argument,  // the caller passed something loom cannot accept
  cuda,              // CUDA runtime, driver, cuBLAS/cuBLASLt or cuDNN failure
  nccl,              // NCCL failure
  mpi,               // MPI failure
  timeout,           // a wait (collective, peer, rendezvous) ran past its deadline
  io,                // a file or socket could not be read or written
  corrupt_data,      // data was read but is not what it claims to be (checksum, format, size)
  out_of_memory,     // an allocator could not satisfy a request, even after releasing its cache
  aborted,           // another rank failed and aborted the communicator (its error is in the message)
};

std::string_view to_string(ErrorCategory category) noexcept;

class Error : public std::runtime_error {
 public:
  // what() reads "loom <category> error [rank R]: <detail>"; the rank part only when known.
  // Without a rank, the launcher's rank (launcher_rank()) is used when there is one.
  Error(ErrorCategory category, std::string detail);
  // For code that knows its rank better than the environment (e.g. ranks running as threads);
  // rank -1 means none.
  Error(ErrorCategory category, std::string detail, int rank);

  ErrorCategory category() const noexcept { return category_; }
  const std::string& detail() const noexcept { return detail_; }
  int rank() const noexcept { return rank_; }  // -1 when the process has no launcher rank

 private:
  ErrorCategory category_;
  std::string detail_;
  int rank_;
};

namespace detail {
template <class... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}
}  // namespace detail

// Throws Error(category, concatenation of parts). The parts are only formatted on failure.
template <class... Parts>
[[noreturn]] void fail(ErrorCategory category, const Parts&... parts) {
  throw Error(category, detail::concat(parts...));
}

// Argument validation: throws an invalid_argument Error made of parts unless ok.
template <class... Parts>
void require(bool ok, const Parts&... parts) {
  if (!ok) fail(ErrorCategory::invalid_argument, parts...);
}

// The same for input of another kind (corrupt_data for a damaged file, io for a missing one).
template <class... Parts>
void require(bool ok, ErrorCategory category, const Parts&... parts) {
  if (!ok) fail(category, parts...);
}

}  // namespace loom
