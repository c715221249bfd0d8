// Encryption at rest of what loom keeps on disk: every file of a checkpoint (both layouts, and
// what loom-ckpt consolidates or exports from one) in loom's encrypted format
// (crypt/encrypted_file.hpp), and token shards read back from it (data/shard_stream.hpp).
//
// One key per process, like the file modes (io/files.hpp): train_gpt --key-file or LOOM_KEY_FILE
// sets it before anything is written. With a key set, what loom writes as checkpoint data is
// encrypted; without one it is plain, as before. Reading judges each file by its header; an
// encrypted file met without a key, or under another key, is an invalid_argument Error naming the
// file and the key id it needs, never "corruption". A run with a key refuses to resume from a
// plain checkpoint or to train on plain token shards (require_encrypted_input), so that nobody
// who can write the folder slips plain weights or data in, unless plain input is allowed
// (train_gpt --allow-plain-input: a run moving to encryption, public data).
//
// A checkpoint is all of one kind: its state.json says which (it is encrypted too), and a data
// file of the other kind is refused by name (Expect), so nobody can slip a plain file into an
// encrypted checkpoint. Sizes and CRC-32s in state.json are of the plaintext: the same numbers a
// plain save of the same state writes, and the check loom made before encryption existed.
//
// Encrypted files cannot be read at an offset (every chunk is chained to the one before): a reader
// that takes pieces where they lie (PieceFile) reads through PlaintextReader, which streams
// forward through one chunk of memory, decrypting up to the last piece it is asked for.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "loom/crypt/key.hpp"
#include "loom/io/files.hpp"

namespace loom::io {

// The process's key for encryption at rest; null (the default): files are written plain.
void set_at_rest_key(std::shared_ptr<const crypt::SecretKey> key);
std::shared_ptr<const crypt::SecretKey> at_rest_key();

// With a key set, whether plain checkpoints and token shards may be read (default: no).
void set_plain_input_allowed(bool allowed);
bool plain_input_allowed();
// invalid_argument Error, naming path as `what` (a checkpoint, a token shard) and the flag that
// allows it, when the process has a key, plain input is not allowed and path is plain (or not a
// regular file; a missing one passes, for its reader to name). A check by name: a reader enforces
// it on what it opened with require_plain_allowed, once it has judged the file itself.
void require_encrypted_input(const std::string& path, const char* what);
// The same for a file already judged plain.
void require_plain_allowed(const std::string& path, const char* what);

// What kind a file read back must be.
enum class Expect { any, plain, encrypted };

// A file written front to back, owner-only (io/files.hpp's mode), encrypted under the process's
// key when one is set. finish() flushes, fsyncs and closes, and returns the plaintext's size and
// CRC-32 (computed as it was written); a file not finished is removed by the destructor. A
// symbolic link, a FIFO or another user's file at path is refused, never written through.
class OutputFile {
 public:
  // max_bytes_per_second > 0: the data goes out in 4 MiB chunks no faster than this on average (a
  // checkpoint written in the background leaves the disk and the page cache to training's reads).
  explicit OutputFile(const std::string& path, double max_bytes_per_second = 0);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  void write(const void* data, std::size_t bytes);
  // Counts bytes whose CRC-32 the caller knows already (combined, not computed again).
  void write_known(const void* data, std::size_t bytes, std::uint32_t crc);
  FileDigest finish();
  bool encrypted() const noexcept { return encrypted_; }
  const std::string& path() const noexcept { return path_; }

 private:
  void put(const void* data, std::size_t bytes);
  void put_now(const void* data, std::size_t bytes);
  struct Sink;
  std::string path_;
  double max_bytes_per_second_ = 0;
  std::chrono::steady_clock::time_point paced_from_ = std::chrono::steady_clock::now();
  std::uint64_t paced_bytes_ = 0;
  bool encrypted_ = false;
  bool created_ = false;  // plain: this file is ours to remove if it is not finished
  std::unique_ptr<Sink> sink_;
  FileDigest digest_;
  bool finished_ = false;
};

// A file's plaintext read at offsets, plain or encrypted alike. A plain file is read where the
// bytes lie (pread). An encrypted one is a forward stream of verified chunks: bytes are handed on
// only from chunks that authenticated, and a read ahead decrypts what it passes over: memory is
// one chunk, whatever the file's size. A reader that goes back (out of file order) has the whole
// file decrypted into memory once, at its first step back. Not thread-safe.
class PlaintextReader {
 public:
  // Opens path once and judges its kind by the first bytes of that open, refusing (corrupt_data)
  // the other kind than `expect`; a FIFO or anything else but a regular file is an io Error. An
  // encrypted file needs the process's key (an invalid_argument Error names the key id it needs).
  explicit PlaintextReader(std::string path, Expect expect = Expect::any);
  ~PlaintextReader();
  PlaintextReader(const PlaintextReader&) = delete;
  PlaintextReader& operator=(const PlaintextReader&) = delete;

  const std::string& path() const noexcept { return path_; }
  // Judged by the first bytes of this reader's own open of the file.
  bool encrypted() const noexcept;
  // The plaintext's size (an encrypted file's from its header and length).
  std::uint64_t size() const noexcept { return size_; }
  // Exactly `bytes` at `offset`: a corrupt_data Error naming the file when they go past its end
  // or a chunk on the way fails to authenticate; io Error when it cannot be read. After a failure
  // every later read throws the same Error.
  void read(void* out, std::size_t bytes, std::uint64_t offset);
  // The whole plaintext, an encrypted file verified to its final chunk and its end.
  std::string read_all();

 private:
  void require_expected(bool encrypted, Expect expect) const;
  struct Source;
  std::string path_;
  std::uint64_t size_ = 0;
  std::unique_ptr<Source> source_;
};

// Whether path is in loom's encrypted format (reads its first bytes); io Error when unreadable.
bool is_encrypted_at_rest(const std::string& path);
// Whether path is encrypted, refusing (corrupt_data Error naming it) a file of the other kind than
// `expect`.
bool encrypted_as_expected(const std::string& path, Expect expect);
// invalid_argument Error when path is encrypted and the process has no key or another one (the
// Error names the key id it needs); nothing when it is plain or absent.
void require_key_for(const std::string& path);
// A whole file's contents: decrypted and verified to its final chunk when it is encrypted.
std::string read_at_rest(const std::string& path, Expect expect = Expect::any);
// The plaintext's size without reading the data (an encrypted file's from its header and size).
std::uint64_t plaintext_size(const std::string& path, Expect expect = Expect::any);
// The plaintext's size and CRC-32, streamed (an encrypted file verified chunk by chunk).
FileDigest digest_at_rest(const std::string& path, Expect expect = Expect::any);
// write_file_atomically (io/files.hpp), encrypted under the process's key when one is set.
void write_at_rest_atomically(const std::string& path, const std::string& contents);

}  // namespace loom::io
