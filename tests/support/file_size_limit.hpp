// A file-size limit for this process while it lives (RLIMIT_FSIZE: a write past it is short, then
// fails with EFBIG), with SIGXFSZ ignored so the limit is an error, not the end of the test run:
// how the tests make a disk fill up at a chosen byte.
#pragma once

#include <sys/resource.h>

#include <csignal>

namespace loom::test {

struct FileSizeLimit {
  rlimit saved{};
  void (*saved_handler)(int) = nullptr;
  explicit FileSizeLimit(rlim_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &saved);
    saved_handler = std::signal(SIGXFSZ, SIG_IGN);
    rlimit limited = saved;
    limited.rlim_cur = bytes;
    ::setrlimit(RLIMIT_FSIZE, &limited);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &saved);
    std::signal(SIGXFSZ, saved_handler);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;
};

}  // namespace loom::test
