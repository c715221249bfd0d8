#include "loom/io/at_rest.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "loom/core/error.hpp"
#include "loom/crypt/encrypted_file.hpp"
#include "src/core/unique_fd.hpp"
#include "src/core/writeback.hpp"

namespace loom::io {

namespace {

std::mutex key_mutex;
std::shared_ptr<const crypt::SecretKey> process_key;

// The key that opens an encrypted file, or an Error that says which key the file needs.
std::shared_ptr<const crypt::SecretKey> key_for(const std::string& path) {
  std::shared_ptr<const crypt::SecretKey> key = at_rest_key();
  if (key == nullptr) {
    fail(ErrorCategory::invalid_argument, "'", path, "' is encrypted (key id ",
         crypt::to_hex(crypt::inspect_encrypted_file(path).key_id),
         "); give its key with --key-file or LOOM_KEY_FILE");
  }
  return key;
}

void add(FileDigest& digest, const void* data, std::size_t bytes) {
  digest.crc32 = crc32({static_cast<const unsigned char*>(data), bytes}, digest.crc32);
  digest.bytes += bytes;
}

}  // namespace

void set_at_rest_key(std::shared_ptr<const crypt::SecretKey> key) {
  const std::lock_guard lock(key_mutex);
  process_key = std::move(key);
}

std::shared_ptr<const crypt::SecretKey> at_rest_key() {
  const std::lock_guard lock(key_mutex);
  return process_key;
}

// ---- OutputFile -----------------------------------------------------------------------------

struct OutputFile::Sink {
  detail::Fd fd;                                     // plain, or
  detail::Writeback writeback;
  std::unique_ptr<crypt::EncryptingWriter> sealed;   // encrypted
};

OutputFile::OutputFile(const std::string& path, double max_bytes_per_second)
    : path_(path), max_bytes_per_second_(max_bytes_per_second), sink_(std::make_unique<Sink>()) {
  require(max_bytes_per_second >= 0 && std::isfinite(max_bytes_per_second), "'", path,
          "': the write rate limit must be >= 0 bytes/s (0: none), got ", max_bytes_per_second);
  const std::shared_ptr<const crypt::SecretKey> key = at_rest_key();
  encrypted_ = key != nullptr;
  if (encrypted_) {
    sink_->sealed = std::make_unique<crypt::EncryptingWriter>(path, *key, crypt::default_chunk_bytes,
                                                             private_file_mode());
    return;
  }
  sink_->fd = detail::Fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC,
                                private_file_mode()));
  if (sink_->fd.get() < 0) fail(ErrorCategory::io, "cannot create '", path, "': ", std::strerror(errno));
  // The mode before any byte: the umask, or an older file's mode, may have let others in.
  if (::fchmod(sink_->fd.get(), private_file_mode()) != 0) {
    fail(ErrorCategory::io, "cannot make '", path, "' owner-only: ", std::strerror(errno));
  }
}

OutputFile::~OutputFile() {
  if (finished_) return;
  // An unfinished file must not look like a result (the encrypting writer removes its own).
  if (!encrypted_ && sink_ && sink_->fd.get() >= 0) ::unlink(path_.c_str());
}

void OutputFile::put(const void* data, std::size_t bytes) {
  require(!finished_, "'", path_, "': written after it was finished");
  if (max_bytes_per_second_ > 0) {
    // Paced: after each chunk, sleep until the bytes written so far are due at the given rate.
    constexpr std::size_t chunk = std::size_t{4} << 20;
    const auto* at = static_cast<const unsigned char*>(data);
    for (std::size_t done = 0; done < bytes;) {
      const std::size_t n = std::min(chunk, bytes - done);
      put_now(at + done, n);
      done += n;
      paced_bytes_ += n;
      std::this_thread::sleep_until(paced_from_ + std::chrono::duration<double>(static_cast<double>(paced_bytes_) /
                                                                                max_bytes_per_second_));
    }
    return;
  }
  put_now(data, bytes);
}

void OutputFile::put_now(const void* data, std::size_t bytes) {
  if (encrypted_) {
    sink_->sealed->write({static_cast<const unsigned char*>(data), bytes});
    return;
  }
  const auto* at = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(sink_->fd.get(), at, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(ErrorCategory::io, "cannot write '", path_, "': ", std::strerror(errno));
    at += n;
    bytes -= static_cast<std::size_t>(n);
    sink_->writeback.wrote(sink_->fd.get(), static_cast<std::uint64_t>(n));
  }
}

void OutputFile::write(const void* data, std::size_t bytes) {
  put(data, bytes);
  add(digest_, data, bytes);
}

void OutputFile::write_known(const void* data, std::size_t bytes, std::uint32_t crc) {
  put(data, bytes);
  digest_.crc32 = crc32_combine(digest_.crc32, crc, bytes);
  digest_.bytes += bytes;
}

FileDigest OutputFile::finish() {
  require(!finished_, "'", path_, "': finished twice");
  if (encrypted_) {
    sink_->sealed->close();
  } else {
    if (::fsync(sink_->fd.get()) != 0) fail(ErrorCategory::io, "cannot fsync '", path_, "': ", std::strerror(errno));
    // A network filesystem may report a failed write only at close.
    if (::close(sink_->fd.release()) != 0) fail(ErrorCategory::io, "cannot write '", path_, "': ", std::strerror(errno));
  }
  finished_ = true;
  return digest_;
}

// ---- reading --------------------------------------------------------------------------------

bool is_encrypted_at_rest(const std::string& path) {
  if (::access(path.c_str(), R_OK) != 0) fail(ErrorCategory::io, "cannot open '", path, "': ", std::strerror(errno));
  return crypt::is_encrypted_file(path);
}

void require_key_for(const std::string& path) {
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error) || !crypt::is_encrypted_file(path)) return;
  crypt::KeyId needed{};
  try {
    needed = crypt::inspect_encrypted_file(path).key_id;
  } catch (const Error&) {
    return;  // a damaged header is damage: reading the file says so
  }
  const std::shared_ptr<const crypt::SecretKey> key = key_for(path);
  require(key->id() == needed, "'", path, "' is encrypted under key id ", crypt::to_hex(needed),
          ", but the key given (--key-file or LOOM_KEY_FILE) has id ", key->id_hex());
}

bool encrypted_as_expected(const std::string& path, Expect expect) {
  const bool encrypted = is_encrypted_at_rest(path);
  if (expect == Expect::encrypted && !encrypted) {
    fail(ErrorCategory::corrupt_data, "'", path, "' is a plain file in an encrypted checkpoint (its state.json is "
         "encrypted): a plain file may not stand in for an encrypted one");
  }
  if (expect == Expect::plain && encrypted) {
    fail(ErrorCategory::corrupt_data, "'", path, "' is encrypted in a plain checkpoint (its state.json is not)");
  }
  return encrypted;
}

std::string read_at_rest(const std::string& path, Expect expect) {
  if (!encrypted_as_expected(path, expect)) return read_file(path);
  const std::shared_ptr<const crypt::SecretKey> key = key_for(path);
  crypt::DecryptingReader reader(path, *key);
  std::string plain(reader.info().plaintext_bytes, '\0');
  std::size_t at = 0;
  // read() hands on one verified chunk at a time; the size comes from the file's length, and the
  // final chunk must end exactly there.
  while (true) {
    const std::size_t got =
        reader.read({reinterpret_cast<unsigned char*>(plain.data()) + at, plain.size() - at});
    if (got == 0) break;
    at += got;
  }
  // One more call verifies the final chunk (which may hold nothing) and that nothing follows it.
  unsigned char beyond = 0;
  const bool ends = reader.read({&beyond, 1}) == 0;
  require(at == plain.size() && ends, ErrorCategory::corrupt_data, "'", path, "' does not decrypt to the ",
          plain.size(), " bytes its size says");
  return plain;
}

std::uint64_t plaintext_size(const std::string& path, Expect expect) {
  if (!encrypted_as_expected(path, expect)) {
    std::error_code error;
    const std::uintmax_t bytes = std::filesystem::file_size(path, error);
    if (error) fail(ErrorCategory::io, "cannot stat '", path, "': ", error.message());
    return bytes;
  }
  return crypt::inspect_encrypted_file(path).plaintext_bytes;
}

FileDigest digest_at_rest(const std::string& path, Expect expect) {
  if (!encrypted_as_expected(path, expect)) return digest_file(path);
  const std::shared_ptr<const crypt::SecretKey> key = key_for(path);
  crypt::DecryptingReader reader(path, *key);
  std::vector<unsigned char> buffer(reader.info().chunk_bytes);
  FileDigest digest;
  while (const std::size_t got = reader.read(buffer)) add(digest, buffer.data(), got);
  return digest;
}

void write_at_rest_atomically(const std::string& path, const std::string& contents) {
  if (at_rest_key() == nullptr) {
    write_file_atomically(path, contents);
    return;
  }
  const std::string temporary = path + ".tmp";
  {
    OutputFile out(temporary);
    out.write(contents.data(), contents.size());
    out.finish();
  }
  std::error_code error;
  std::filesystem::rename(temporary, path, error);
  if (error) fail(ErrorCategory::io, "cannot rename '", temporary, "' to '", path, "': ", error.message());
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  sync_path(parent.empty() ? std::string(".") : parent.string());
}

}  // namespace loom::io
