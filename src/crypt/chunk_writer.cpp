#include "src/crypt/chunk_writer.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "loom/core/error.hpp"

namespace loom::crypt::detail {

void write_fully(int fd, const unsigned char* data, std::size_t n, const std::string& name) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) fail(ErrorCategory::io, "cannot write '", name, "': ", std::strerror(errno));
    data += w;
    n -= static_cast<std::size_t>(w);
  }
}

ChunkWriter::ChunkWriter(int fd, std::string name, std::size_t buffer_bytes, std::size_t depth)
    : fd_(fd), name_(std::move(name)), lengths_(depth, 0) {
  for (std::size_t i = 0; i < depth; ++i) {
    buffers_.emplace_back(buffer_bytes);
    free_.push_back(i);
  }
  // Started here, not at the first chunk: a file of one chunk pays ~50 us for it, next to its fsync.
  thread_ = std::thread([this] { run(); });
}

ChunkWriter::~ChunkWriter() {
  {
    const std::lock_guard lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void ChunkWriter::rethrow_locked() {
  if (error_) std::rethrow_exception(error_);
}

unsigned char* ChunkWriter::next() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return !free_.empty() || error_; });
  rethrow_locked();
  filling_ = free_.front();
  free_.pop_front();
  have_filling_ = true;
  return buffers_[filling_].data();
}

void ChunkWriter::submit(std::size_t bytes) {
  {
    const std::lock_guard lock(mutex_);
    rethrow_locked();
    require(have_filling_ && bytes <= buffers_[filling_].size(), "ChunkWriter: submit without a buffer from next()");
    lengths_[filling_] = bytes;
    queued_.push_back(filling_);
    have_filling_ = false;
  }
  changed_.notify_all();
}

void ChunkWriter::drain() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return (queued_.empty() && !busy_) || error_; });
  rethrow_locked();
}

void ChunkWriter::write_now(const unsigned char* data, std::size_t bytes) {
  drain();
  write_fully(fd_, data, bytes, name_);
  writeback_.wrote(fd_, bytes);
}

void ChunkWriter::run() {
  std::unique_lock lock(mutex_);
  while (true) {
    changed_.wait(lock, [&] { return stop_ || !queued_.empty(); });
    if (stop_) return;
    const std::size_t i = queued_.front();
    queued_.pop_front();
    busy_ = true;
    lock.unlock();
    std::exception_ptr error;
    try {
      write_fully(fd_, buffers_[i].data(), lengths_[i], name_);
      writeback_.wrote(fd_, lengths_[i]);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    busy_ = false;
    free_.push_back(i);
    if (error) {
      error_ = error;
      queued_.clear();  // nothing after a failed write reaches the file
    }
    changed_.notify_all();
  }
}

}  // namespace loom::crypt::detail
