// Write-back started as a file is written, for the large files of a checkpoint. Without it the
// kernel holds a file's dirty pages until the final fsync (a checkpoint is far below the dirty
// threshold), so the disk sits idle while the writer is busy (encrypting, say) and then the fsync
// waits for all of it. Asking for write-back every few MiB (sync_file_range WRITE: start it, do not
// wait) lets the disk work while the writer goes on, and leaves the fsync little to do.
#pragma once

#include <fcntl.h>

#include <cstdint>

namespace loom::detail {

class Writeback {
 public:
  static constexpr std::uint64_t every = std::uint64_t{8} << 20;

  // Counts bytes appended to fd; starts write-back of what has piled up since the last call. A
  // hint: a file system that cannot (tmpfs, some network ones) just leaves it to the fsync.
  void wrote(int fd, std::uint64_t bytes) noexcept {
    written_ += bytes;
    if (written_ - started_ < every) return;
    ::sync_file_range(fd, static_cast<off_t>(started_), static_cast<off_t>(written_ - started_), SYNC_FILE_RANGE_WRITE);
    started_ = written_;
  }

 private:
  std::uint64_t written_ = 0, started_ = 0;
};

}  // namespace loom::detail
