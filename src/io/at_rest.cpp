#include "loom/io/at_rest.hpp"

#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <filesystem>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "loom/core/error.hpp"
#include "loom/crypt/encrypted_file.hpp"
#include "loom/crypt/key.hpp"
#include "src/core/owned_output.hpp"
#include "src/core/unique_fd.hpp"
#include "src/core/writeback.hpp"

namespace loom::io {

namespace {

std::mutex key_mutex;
std::shared_ptr<const crypt::SecretKey> process_key;
bool plain_allowed = false;

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

void set_plain_input_allowed(bool allowed) {
  const std::lock_guard lock(key_mutex);
  plain_allowed = allowed;
}

bool plain_input_allowed() {
  const std::lock_guard lock(key_mutex);
  return plain_allowed;
}

void require_plain_allowed(const std::string& path, const char* what) {
  const std::shared_ptr<const crypt::SecretKey> key = at_rest_key();
  if (key == nullptr || plain_input_allowed()) return;
  fail(ErrorCategory::invalid_argument, what, " '", path, "' is plain, but this run encrypts at rest (key id ",
       key->id_hex(), "), so it reads only encrypted input: encrypt it with loom-crypt encrypt, or pass "
       "--allow-plain-input to read plain files");
}

void require_encrypted_input(const std::string& path, const char* what) {
  if (at_rest_key() == nullptr || plain_input_allowed()) return;
  std::error_code error;
  const std::filesystem::file_status status = std::filesystem::status(path, error);
  if (status.type() == std::filesystem::file_type::not_found) return;  // named by whoever reads it
  if (!std::filesystem::is_regular_file(status)) {
    fail(ErrorCategory::invalid_argument, what, " '", path, "' is not a regular file: refused");
  }
  if (!crypt::is_encrypted_file(path)) require_plain_allowed(path, what);
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
  sink_->fd = detail::Fd(detail::open_owned_output(path, private_file_mode(), false));
  created_ = true;
}

OutputFile::~OutputFile() {
  if (finished_) return;
  // An unfinished file must not look like a result (the encrypting writer removes its own), nor
  // one whose close failed after its descriptor was given up.
  if (created_) ::unlink(path_.c_str());
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
    // At most write-back's interval per call: a tensor of 100s of MB in one write() would be all
    // dirty before its write-back starts, and the fsync would then wait for all of it.
    const ssize_t n = ::write(sink_->fd.get(), at, std::min<std::size_t>(bytes, detail::Writeback::every));
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
  PlaintextReader file(path, expect);
  return file.read_all();
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

// ---- PlaintextReader ------------------------------------------------------------------------

struct PlaintextReader::Source {
  detail::Fd fd;  // one open: judged, then read (plain: pread; encrypted: the reader's pread)
  std::shared_ptr<const crypt::SecretKey> key;        // encrypted: the reader and where it stands
  std::unique_ptr<crypt::DecryptingReader> sealed;
  std::uint64_t position = 0;
  std::vector<unsigned char> passed;  // where the bytes a read ahead passes over go
  std::string whole;                  // after a read behind: the whole plaintext
  bool held = false;
  std::exception_ptr failed;          // the first failure, thrown again by every later read
  ~Source() {  // plaintext of a checkpoint or a shard: not left in freed memory
    sodium_memzero(passed.data(), passed.size());
    sodium_memzero(whole.data(), whole.size());
  }
};

PlaintextReader::PlaintextReader(std::string path, Expect expect)
    : path_(std::move(path)), source_(std::make_unique<Source>()) {
  Source& s = *source_;
  // O_NONBLOCK: a FIFO must not block the open; it is refused below (for a file it does nothing).
  s.fd = detail::Fd(::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (s.fd.get() < 0) fail(ErrorCategory::io, "cannot open '", path_, "': ", std::strerror(errno));
  struct stat info {};
  if (::fstat(s.fd.get(), &info) != 0) fail(ErrorCategory::io, "cannot stat '", path_, "': ", std::strerror(errno));
  if (!S_ISREG(info.st_mode)) fail(ErrorCategory::io, "'", path_, "' is not a regular file: refused");
  detail::clear_nonblocking(s.fd.get());
  size_ = static_cast<std::uint64_t>(info.st_size);
  // Judged by the bytes of this open, not of another open by name.
  const bool encrypted = crypt::is_encrypted_descriptor(s.fd.get());
  require_expected(encrypted, expect);
  if (!encrypted) return;
  s.key = key_for(path_);
  s.sealed = std::make_unique<crypt::DecryptingReader>(s.fd.get(), *s.key, path_);
  size_ = s.sealed->info().plaintext_bytes;
}

PlaintextReader::~PlaintextReader() = default;

bool PlaintextReader::encrypted() const noexcept { return source_->key != nullptr; }

void PlaintextReader::require_expected(bool encrypted, Expect expect) const {
  if (expect == Expect::encrypted && !encrypted) {
    fail(ErrorCategory::corrupt_data, "'", path_, "' is a plain file in an encrypted checkpoint (its state.json is "
         "encrypted): a plain file may not stand in for an encrypted one");
  }
  if (expect == Expect::plain && encrypted) {
    fail(ErrorCategory::corrupt_data, "'", path_, "' is encrypted in a plain checkpoint (its state.json is not)");
  }
}

void PlaintextReader::read(void* out, std::size_t bytes, std::uint64_t offset) {
  Source& s = *source_;
  if (s.failed) std::rethrow_exception(s.failed);
  if (offset > size_ || bytes > size_ - offset) {
    fail(ErrorCategory::corrupt_data, "'", path_, "': ", bytes, " bytes at byte ", offset, " go past its end at ",
         size_, " (truncated?)");
  }
  auto* at = static_cast<unsigned char*>(out);
  if (!s.key) {
    while (bytes > 0) {
      const ssize_t got = ::pread(s.fd.get(), at, bytes, static_cast<off_t>(offset));
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) fail(ErrorCategory::io, "cannot read '", path_, "': ", std::strerror(errno));
      if (got == 0) fail(ErrorCategory::corrupt_data, "'", path_, "' ends at byte ", offset, " (truncated)");
      at += got;
      offset += static_cast<std::uint64_t>(got);
      bytes -= static_cast<std::size_t>(got);
    }
    return;
  }
  try {
    if (offset < s.position && !s.held) {
      // Behind: a reader out of file order would decrypt from the header again and again, so the
      // whole file is decrypted (and verified) once, from this same open, and held.
      crypt::DecryptingReader again(s.fd.get(), *s.key, path_);
      s.whole.assign(size_, '\0');
      std::uint64_t done = 0;
      while (done < size_) {
        const std::size_t got = again.read({reinterpret_cast<unsigned char*>(s.whole.data()) + done, size_ - done});
        if (got == 0) break;
        done += got;
      }
      unsigned char beyond = 0;
      require(done == size_ && again.read({&beyond, 1}) == 0, ErrorCategory::corrupt_data, "'", path_,
              "' does not decrypt to the ", size_, " bytes its size says");
      s.held = true;
      s.sealed.reset();
    }
    if (s.held) {
      std::memcpy(at, s.whole.data() + offset, bytes);
      return;
    }
    // next(): bytes from the stream into `to`; the header's size says they are there, so a stream
    // that ends first was cut short (the reader verified every chunk it handed on).
    auto next = [&](unsigned char* to, std::size_t n) {
      const std::size_t got = s.sealed->read({to, n});
      if (got == 0) {
        fail(ErrorCategory::corrupt_data, "'", path_, "' ends at plaintext byte ", s.position, ", before the ", size_,
             " bytes its size says");
      }
      s.position += got;
      return got;
    };
    if (s.position < offset) s.passed.resize(std::min<std::size_t>(s.sealed->info().chunk_bytes, 1u << 20));
    while (s.position < offset) {
      next(s.passed.data(), static_cast<std::size_t>(std::min<std::uint64_t>(s.passed.size(), offset - s.position)));
    }
    for (std::size_t done = 0; done < bytes;) done += next(at + done, bytes - done);
  } catch (...) {
    s.failed = std::current_exception();
    throw;
  }
}

std::string PlaintextReader::read_all() {
  std::string all(size_, '\0');
  read(all.data(), all.size(), 0);
  Source& s = *source_;
  if (s.sealed) {
    // One more call verifies the final chunk (which may hold nothing) and that nothing follows.
    unsigned char beyond = 0;
    require(s.sealed->read({&beyond, 1}) == 0, ErrorCategory::corrupt_data, "'", path_, "' holds more than the ",
            size_, " bytes its size says");
  }
  return all;
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
