// loom's encrypted file format, for checkpoints and token shards at rest.
//
// libsodium's crypto_secretstream_xchacha20poly1305 over fixed-size chunks, so files of any size
// stream through a chunk of memory, and every chunk is authenticated in its place: an altered,
// dropped, reordered, truncated or appended chunk fails by name, and nothing of a file that fails
// is handed on as good data.
//
//   header, 80 bytes (authenticated as the first chunk's additional data):
//     0  "LOOMCRYP"                       8  format version (u32 LE, 1)
//     12 plaintext bytes per chunk (u32 LE, 1 KiB .. 64 MiB)
//     16 key id (16 bytes: BLAKE2b keyed with the key, never the key)
//     32 secretstream header (24 bytes)   56 zeros (8)
//     64 BLAKE2b-128 of bytes 0..63 (unkeyed: a damaged header is told from a wrong key)
//   chunks: each chunk_bytes of plaintext + 17 bytes (tag and MAC); the last one, tagged final,
//   holds the rest (0 .. chunk_bytes) and ends the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "loom/crypt/key.hpp"

namespace loom::crypt {

inline constexpr std::size_t header_bytes = 80;
inline constexpr std::size_t default_chunk_bytes = std::size_t{1} << 20;
inline constexpr std::size_t min_chunk_bytes = std::size_t{1} << 10;
inline constexpr std::size_t max_chunk_bytes = std::size_t{64} << 20;

// What the header says; no key needed.
struct EncryptedFileInfo {
  std::uint32_t version = 0;
  std::size_t chunk_bytes = 0;
  KeyId key_id{};
  std::uint64_t file_bytes = 0;
  std::uint64_t chunks = 0;           // from the file's size
  std::uint64_t plaintext_bytes = 0;  // from the file's size
};

// Whether the file starts with the encrypted format's magic (a cheap test, no key); false for
// anything but a regular file.
bool is_encrypted_file(const std::string& path);
// The same for an open descriptor (read with pread at 0: its offset is left as it was).
bool is_encrypted_descriptor(int fd);
// Reads and checks the header: corrupt_data Error naming the path for a plain file, another
// version, a damaged header or a size no chunk sequence has.
EncryptedFileInfo inspect_encrypted_file(const std::string& path);

// Writes an encrypted file from sequential writes. close() writes the final chunk, fsyncs and
// closes; a writer destroyed without close() removes its incomplete file. Sealed chunks are
// written by a thread of the writer's own while the next ones are sealed; a failed write is
// thrown by a later write() or close().
class EncryptingWriter {
 public:
  // Creates (or truncates) path with `mode` (owner-only by default): a symbolic link there, or a
  // file another user owns, is refused (io Error), never written through.
  EncryptingWriter(const std::string& path, const SecretKey& key, std::size_t chunk_bytes = default_chunk_bytes,
                   unsigned mode = 0600);
  ~EncryptingWriter();
  EncryptingWriter(const EncryptingWriter&) = delete;
  EncryptingWriter& operator=(const EncryptingWriter&) = delete;

  void write(std::span<const unsigned char> data);
  void close();
  std::uint64_t plaintext_bytes() const { return written_; }

 private:
  void seal(std::span<const unsigned char> plain, bool final);
  void seal_held(bool final);  // what plain_ holds, then wiped
  std::string path_;
  int fd_ = -1;
  std::size_t chunk_bytes_;
  struct State;
  std::unique_ptr<State> state_;
  std::vector<unsigned char> plain_;
  std::uint64_t written_ = 0;
};

// Reads an encrypted file sequentially, one authenticated chunk at a time: read() hands on only
// bytes whose chunk was verified, and the end only after the final chunk was.
class DecryptingReader {
 public:
  // Checks the header and the key id (a key other than the file's is an invalid_argument Error
  // naming both ids).
  DecryptingReader(const std::string& path, const SecretKey& key);
  // Over an open descriptor, read from its start with pread (the caller keeps it open while the
  // reader lives): a file judged and decrypted through one open. `name` for errors.
  DecryptingReader(int fd, const SecretKey& key, std::string name);
  // Over bytes in memory (`name` for errors): the fuzz target's way in.
  DecryptingReader(std::span<const unsigned char> file, const SecretKey& key, std::string name);
  ~DecryptingReader();
  DecryptingReader(const DecryptingReader&) = delete;
  DecryptingReader& operator=(const DecryptingReader&) = delete;

  // Up to out.size() bytes, from at most one newly verified chunk; 0 once the final chunk has been
  // read. corrupt_data Error naming the file and chunk for a chunk that fails authentication, a
  // missing final chunk, or bytes after it (from a call that hands on nothing); every later call
  // throws the same Error.
  std::size_t read(std::span<unsigned char> out);
  const EncryptedFileInfo& info() const { return info_; }

 private:
  struct Source;
  void open(const SecretKey& key);
  bool next_chunk();
  std::string name_;
  std::unique_ptr<Source> source_;
  struct State;
  std::unique_ptr<State> state_;
  EncryptedFileInfo info_;
  std::vector<unsigned char> sealed_, plain_;
  std::size_t plain_at_ = 0;
  std::uint64_t chunk_index_ = 0;
  bool finished_ = false;
  std::exception_ptr failed_;  // the first failure, thrown again by every later read()
};

// Reads a whole encrypted file through one chunk of memory, verifying every chunk; returns the
// plaintext's size. Errors as DecryptingReader's.
std::uint64_t verify_encrypted_file(const std::string& path, const SecretKey& key);
// A whole encrypted file's plaintext, verified to its final chunk.
std::vector<unsigned char> read_encrypted_file(const std::string& path, const SecretKey& key);
// Writes bytes as an encrypted file atomically: to path + ".tmp", fsynced, renamed over path.
void write_encrypted_file(const std::string& path, std::span<const unsigned char> bytes, const SecretKey& key,
                          std::size_t chunk_bytes = default_chunk_bytes);
// File to file, streaming (for loom-crypt): the output appears whole, under its name, or not at
// all. decrypt_file keeps `mode` for what it writes too.
void encrypt_file(const std::string& plain, const std::string& encrypted, const SecretKey& key,
                  std::size_t chunk_bytes = default_chunk_bytes);
void decrypt_file(const std::string& encrypted, const std::string& plain, const SecretKey& key, unsigned mode = 0600);
// Re-encrypts a file under another key in place (same chunk size), streaming: every chunk is
// verified under `from` first, and the file is replaced only once the new one is complete.
void rekey_file(const std::string& path, const SecretKey& from, const SecretKey& to);

}  // namespace loom::crypt
