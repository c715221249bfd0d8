// Sealed chunks written from a thread of their own (EncryptingWriter's): the caller seals chunk
// i + 1 while this thread's write() of chunk i waits for the page cache and the disk's write-back.
// Without it an encrypted save costs the sealing plus the write (1.5x a plain save on one rank, in
// ckpt_bench); with it, about the slower of the two.
//
// A fixed ring of `depth` buffers: next() hands the caller a free one (waiting while all are
// queued), submit() queues it. The thread writes them in order; its first error is kept and
// rethrown by the caller's next next(), submit() or drain(), and nothing after it is written. The
// buffers hold ciphertext only, so they need no wiping.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "src/core/writeback.hpp"

namespace loom::crypt::detail {

// All n bytes to fd (retrying short writes and EINTR); io Error naming `name` otherwise.
void write_fully(int fd, const unsigned char* data, std::size_t n, const std::string& name);

class ChunkWriter {
 public:
  // fd stays the caller's (it closes it, after drain()); name is for errors.
  ChunkWriter(int fd, std::string name, std::size_t buffer_bytes, std::size_t depth = 4);
  // Stops the thread; what is still queued is dropped (a writer destroyed before drain() is
  // abandoning its file).
  ~ChunkWriter();
  ChunkWriter(const ChunkWriter&) = delete;
  ChunkWriter& operator=(const ChunkWriter&) = delete;

  // A free buffer of buffer_bytes to fill.
  unsigned char* next();
  // Queues the first `bytes` of the buffer next() gave.
  void submit(std::size_t bytes);
  // Waits until everything queued is written (write-back started as it goes, see writeback.hpp).
  void drain();
  // Writes bytes on the caller's thread, in order after everything queued (drains first).
  void write_now(const unsigned char* data, std::size_t bytes);

 private:
  void run();
  void rethrow_locked();
  int fd_;
  std::string name_;
  std::vector<std::vector<unsigned char>> buffers_;
  std::vector<std::size_t> lengths_;
  std::deque<std::size_t> queued_, free_;
  std::size_t filling_ = 0;
  bool have_filling_ = false, busy_ = false, stop_ = false;
  std::exception_ptr error_;
  loom::detail::Writeback writeback_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::thread thread_;
};

}  // namespace loom::crypt::detail
