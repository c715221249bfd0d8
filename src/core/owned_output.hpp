// Opening a file to write that is this user's own and nobody else's: a symbolic link, a FIFO or a
// file another user planted at the path (in a folder others may write into) is refused, never
// written through, and never truncated; the file gets `mode` before any byte is written, whatever
// the umask or an older file's mode allowed. What every loom writer of data files opens with.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "loom/core/error.hpp"

namespace loom::detail {

// Takes O_NONBLOCK off a descriptor opened with it (to refuse a FIFO without waiting) once it is
// known to be a regular file: some network and FUSE file systems honour it with EAGAIN.
inline void clear_nonblocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0 && (flags & O_NONBLOCK) != 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
}

// `fresh`: the file must not exist yet (O_EXCL); else an existing one of this user's is emptied.
// Returns the descriptor (the caller owns it); io Error naming the path otherwise.
inline int open_owned_output(const std::string& path, unsigned mode, bool fresh) {
  // O_NONBLOCK: a FIFO at the path must not block the open (it is refused below); for a regular
  // file the flag does nothing.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | (fresh ? O_EXCL : 0),
                        mode);
  if (fd < 0 && errno == ENXIO) {  // a FIFO without a reader, or a device node
    fail(ErrorCategory::io, "'", path, "' is not a regular file (a FIFO or a device): refused");
  }
  if (fd < 0) fail(ErrorCategory::io, "cannot create '", path, "': ", std::strerror(errno));
  struct stat info {};
  const bool own = ::fstat(fd, &info) == 0 && S_ISREG(info.st_mode) && info.st_uid == ::geteuid();
  // Emptied only once it is known to be ours (O_TRUNC at open would empty another's file first).
  if (!own || ::fchmod(fd, mode) != 0 || ::ftruncate(fd, 0) != 0) {
    ::close(fd);
    fail(ErrorCategory::io, "'", path, "' is not a regular file of this user's, or its mode cannot be set to ",
         mode == 0600 ? "0600" : "the one asked for", ": refused");
  }
  clear_nonblocking(fd);
  return fd;
}

}  // namespace loom::detail
