#include "loom/core/error.hpp"

#include "loom/core/process.hpp"

namespace loom {

std::string_view to_string(ErrorCategory category) noexcept {
  switch (category) {
    case ErrorCategory::invalid_argument: return "invalid argument";
    case ErrorCategory::cuda: return "CUDA";
    case ErrorCategory::nccl: return "NCCL";
    case ErrorCategory::mpi: return "MPI";
    case ErrorCategory::timeout: return "timeout";
    case ErrorCategory::io: return "I/O";
    case ErrorCategory::corrupt_data: return "corrupt data";
    case ErrorCategory::out_of_memory: return "out of memory";
    case ErrorCategory::aborted: return "aborted";
  }
  return "unknown";
}

namespace {
std::string compose_what(ErrorCategory category, int rank, const std::string& detail) {
  std::string text = "loom ";
  text += to_string(category);
  text += " error";
  if (rank >= 0) text += " [rank " + std::to_string(rank) + "]";
  text += ": ";
  text += detail;
  return text;
}
}  // namespace

Error::Error(ErrorCategory category, std::string detail)
    : Error(category, std::move(detail), launcher_rank().value_or(-1)) {}

Error::Error(ErrorCategory category, std::string detail, int rank)
    : std::runtime_error(compose_what(category, rank, detail)),
      category_(category),
      detail_(std::move(detail)),
      rank_(rank < 0 ? -1 : rank) {}

}  // namespace loom
