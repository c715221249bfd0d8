// The encrypted format (encrypted_file.hpp) over libsodium's secretstream: the writer buffers a
// chunk of plaintext and seals it; the reader reads one sealed chunk ahead of what it hands on.
#include "loom/crypt/encrypted_file.hpp"

#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "loom/core/error.hpp"
#include "src/core/owned_output.hpp"
#include "src/core/unique_fd.hpp"
#include "src/crypt/chunk_writer.hpp"

namespace loom::crypt {

namespace {

constexpr unsigned char magic[8] = {'L', 'O', 'O', 'M', 'C', 'R', 'Y', 'P'};
constexpr std::uint32_t format_version = 1;
constexpr std::size_t digest_at = 64, digest_bytes = 16;
constexpr std::size_t chunk_overhead = crypto_secretstream_xchacha20poly1305_ABYTES;
static_assert(crypto_secretstream_xchacha20poly1305_HEADERBYTES == 24);
static_assert(crypto_secretstream_xchacha20poly1305_KEYBYTES == key_bytes);

void put_u32(unsigned char* at, std::uint32_t value) {
  for (int i = 0; i < 4; ++i) at[i] = static_cast<unsigned char>(value >> (8 * i));
}
std::uint32_t get_u32(const unsigned char* at) {
  std::uint32_t value = 0;
  for (int i = 0; i < 4; ++i) value |= std::uint32_t{at[i]} << (8 * i);
  return value;
}

void header_digest(const unsigned char* header, unsigned char* out) {
  crypto_generichash(out, digest_bytes, header, digest_at, nullptr, 0);
}

// Parses a header (header_bytes of it); corrupt_data Error naming `name` when it is not one.
// `whole`: the file's size must also be one a chunk sequence has (inspect; a reader instead names
// the chunk where it goes wrong, which says more).
EncryptedFileInfo parse_header(const unsigned char* header, std::size_t available, std::uint64_t file_bytes,
                               const std::string& name, bool whole) {
  const bool has_magic = available >= sizeof magic && std::memcmp(header, magic, sizeof magic) == 0;
  if (!has_magic) {
    fail(ErrorCategory::corrupt_data, "'", name, "' is not a loom encrypted file (it does not start with LOOMCRYP): ",
         "a plain file where an encrypted one is expected, or not written by loom");
  }
  if (available < header_bytes) {
    fail(ErrorCategory::corrupt_data, "'", name, "' is truncated inside its encryption header (", available, " of ",
         header_bytes, " bytes)");
  }
  unsigned char digest[digest_bytes];
  header_digest(header, digest);
  if (sodium_memcmp(digest, header + digest_at, digest_bytes) != 0) {
    fail(ErrorCategory::corrupt_data, "'", name, "': its encryption header is damaged (its checksum does not match)");
  }
  EncryptedFileInfo info;
  info.version = get_u32(header + 8);
  if (info.version != format_version) {
    fail(ErrorCategory::corrupt_data, "'", name, "' is in encrypted format version ", info.version,
         "; this loom reads version ", format_version);
  }
  info.chunk_bytes = get_u32(header + 12);
  if (info.chunk_bytes < min_chunk_bytes || info.chunk_bytes > max_chunk_bytes) {
    fail(ErrorCategory::corrupt_data, "'", name, "' declares chunks of ", info.chunk_bytes, " bytes, outside ",
         min_chunk_bytes, " .. ", max_chunk_bytes);
  }
  std::memcpy(info.key_id.data(), header + 16, key_id_bytes);
  info.file_bytes = file_bytes;
  // Every chunk but the last is full; the last holds 0 .. chunk_bytes.
  const std::uint64_t sealed = info.chunk_bytes + chunk_overhead;
  if (whole && file_bytes <= header_bytes) {
    fail(ErrorCategory::corrupt_data, "'", name, "' has no chunk after its header: the file is truncated");
  }
  const std::uint64_t body = file_bytes - std::min<std::uint64_t>(file_bytes, header_bytes);
  if (whole && body % sealed != 0 && body % sealed < chunk_overhead) {
    fail(ErrorCategory::corrupt_data, "'", name, "' ends inside a chunk (", body % sealed,
         " bytes, fewer than a chunk's tag and MAC): the file is truncated or was appended to");
  }
  info.chunks = body == 0 ? 0 : (body + sealed - 1) / sealed;
  info.plaintext_bytes = body - std::min<std::uint64_t>(body, info.chunks * chunk_overhead);
  return info;
}

using loom::detail::Fd;

// Wipes a buffer of plaintext on every path out of a scope.
struct Wiped {
  std::vector<unsigned char>& buffer;
  ~Wiped() {
    buffer.resize(buffer.capacity());
    sodium_memzero(buffer.data(), buffer.size());
  }
};

// Reads up to n bytes (fewer only at the end); io Error on failure.
std::size_t read_fully(int fd, unsigned char* out, std::size_t n, const std::string& name) {
  std::size_t got = 0;
  while (got < n) {
    const ssize_t r = ::read(fd, out + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) fail(ErrorCategory::io, "cannot read '", name, "': ", std::strerror(errno));
    if (r == 0) break;
    got += static_cast<std::size_t>(r);
  }
  return got;
}

std::uint64_t file_size(int fd, const std::string& name) {
  struct stat info {};
  if (::fstat(fd, &info) != 0) fail(ErrorCategory::io, "cannot stat '", name, "': ", std::strerror(errno));
  return static_cast<std::uint64_t>(info.st_size);
}

}  // namespace

// ---- writer ---------------------------------------------------------------------------------

struct EncryptingWriter::State {
  crypto_secretstream_xchacha20poly1305_state stream;
  unsigned char header[header_bytes];
  bool first = true;
  std::unique_ptr<detail::ChunkWriter> out;  // writes chunk i while chunk i + 1 is sealed
  ~State() { sodium_memzero(&stream, sizeof stream); }
};

EncryptingWriter::EncryptingWriter(const std::string& path, const SecretKey& key, std::size_t chunk_bytes,
                                   unsigned mode)
    : path_(path), chunk_bytes_(chunk_bytes), state_(std::make_unique<State>()) {
  ensure_sodium();
  require(chunk_bytes >= min_chunk_bytes && chunk_bytes <= max_chunk_bytes, "encrypted file '", path,
          "': chunks of ", chunk_bytes, " bytes are outside ", min_chunk_bytes, " .. ", max_chunk_bytes);
  fd_ = loom::detail::open_owned_output(path, mode, false);
  unsigned char* h = state_->header;
  std::memset(h, 0, header_bytes);
  std::memcpy(h, magic, sizeof magic);
  put_u32(h + 8, format_version);
  put_u32(h + 12, static_cast<std::uint32_t>(chunk_bytes));
  std::memcpy(h + 16, key.id().data(), key_id_bytes);
  crypto_secretstream_xchacha20poly1305_init_push(&state_->stream, h + 32, key.material());
  header_digest(h, h + digest_at);
  plain_.reserve(chunk_bytes);
  try {
    state_->out = std::make_unique<detail::ChunkWriter>(fd_, path_, chunk_bytes + chunk_overhead);
    state_->out->write_now(h, header_bytes);
  } catch (...) {
    state_->out.reset();
    ::close(fd_);
    fd_ = -1;
    ::unlink(path_.c_str());
    throw;
  }
}

EncryptingWriter::~EncryptingWriter() {
  plain_.resize(plain_.capacity());
  sodium_memzero(plain_.data(), plain_.size());
  state_->out.reset();  // its thread stops before the file goes
  if (fd_ >= 0) {  // never closed: the file is incomplete, and must not look like a result
    ::close(fd_);
    ::unlink(path_.c_str());
  }
}

void EncryptingWriter::seal(std::span<const unsigned char> plain, bool final) {
  unsigned long long length = 0;
  // The header is the first chunk's additional data: a changed header fails that chunk.
  const unsigned char* ad = state_->first ? state_->header : nullptr;
  unsigned char* sealed = state_->out->next();
  crypto_secretstream_xchacha20poly1305_push(&state_->stream, sealed, &length, plain.data(), plain.size(), ad,
                                             ad != nullptr ? header_bytes : 0,
                                             final ? crypto_secretstream_xchacha20poly1305_TAG_FINAL : 0);
  state_->first = false;
  state_->out->submit(static_cast<std::size_t>(length));
}

void EncryptingWriter::seal_held(bool final) {
  seal(plain_, final);
  sodium_memzero(plain_.data(), plain_.size());
  plain_.clear();
}

void EncryptingWriter::write(std::span<const unsigned char> data) {
  require(fd_ >= 0, "encrypted file '", path_, "': write after close");
  while (!data.empty()) {
    // Whole chunks with more to follow are sealed straight from the caller's memory (no copy):
    // after a held chunk is topped up and sealed, the rest of a large write goes this way.
    if (plain_.empty() && data.size() > chunk_bytes_) {
      seal(data.first(chunk_bytes_), false);
      data = data.subspan(chunk_bytes_);
      written_ += chunk_bytes_;
      continue;
    }
    const std::size_t take = std::min(data.size(), chunk_bytes_ - plain_.size());
    plain_.insert(plain_.end(), data.begin(), data.begin() + static_cast<std::ptrdiff_t>(take));
    data = data.subspan(take);
    written_ += take;
    // A full chunk is sealed only when more follows: the final chunk may be full too.
    if (plain_.size() == chunk_bytes_ && !data.empty()) seal_held(false);
  }
}

void EncryptingWriter::close() {
  require(fd_ >= 0, "encrypted file '", path_, "': closed twice");
  // What is held (0 .. chunk_bytes: write() seals a full chunk only when more follows) is the
  // final chunk.
  seal_held(true);
  state_->out->drain();
  state_->out.reset();
  if (::fsync(fd_) != 0) fail(ErrorCategory::io, "cannot fsync '", path_, "': ", std::strerror(errno));
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail(ErrorCategory::io, "cannot close '", path_, "': ", std::strerror(errno));
}

// ---- reader ---------------------------------------------------------------------------------

struct DecryptingReader::Source {
  Fd owned;     // a file opened by path, or
  int fd = -1;  // a descriptor (owned's, or the caller's), read at `at` (pread), or else
  std::span<const unsigned char> memory;
  std::uint64_t at = 0;
  std::size_t read(unsigned char* out, std::size_t n, const std::string& name) {
    if (fd >= 0) {
      std::size_t got = 0;
      while (got < n) {
        const ssize_t r = ::pread(fd, out + got, n - got, static_cast<off_t>(at + got));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) fail(ErrorCategory::io, "cannot read '", name, "': ", std::strerror(errno));
        if (r == 0) break;
        got += static_cast<std::size_t>(r);
      }
      at += got;
      return got;
    }
    const std::size_t take = std::min<std::size_t>(n, memory.size() - at);
    std::memcpy(out, memory.data() + at, take);
    at += take;
    return take;
  }
};

struct DecryptingReader::State {
  crypto_secretstream_xchacha20poly1305_state stream;
  unsigned char header[header_bytes];
  ~State() { sodium_memzero(&stream, sizeof stream); }
};

DecryptingReader::DecryptingReader(const std::string& path, const SecretKey& key)
    : name_(path), source_(std::make_unique<Source>()), state_(std::make_unique<State>()) {
  source_->owned = Fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  source_->fd = source_->owned.get();
  if (source_->fd < 0) fail(ErrorCategory::io, "cannot open '", path, "': ", std::strerror(errno));
  info_.file_bytes = file_size(source_->fd, path);
  open(key);
}

DecryptingReader::DecryptingReader(int fd, const SecretKey& key, std::string name)
    : name_(std::move(name)), source_(std::make_unique<Source>()), state_(std::make_unique<State>()) {
  source_->fd = fd;
  info_.file_bytes = file_size(fd, name_);
  open(key);
}

DecryptingReader::DecryptingReader(std::span<const unsigned char> file, const SecretKey& key, std::string name)
    : name_(std::move(name)), source_(std::make_unique<Source>()), state_(std::make_unique<State>()) {
  source_->memory = file;
  info_.file_bytes = file.size();
  open(key);
}

DecryptingReader::~DecryptingReader() {
  plain_.resize(plain_.capacity());  // a short last chunk or a failure leaves earlier plaintext beyond size()
  sodium_memzero(plain_.data(), plain_.size());
}

void DecryptingReader::open(const SecretKey& key) {
  ensure_sodium();
  const std::size_t got = source_->read(state_->header, header_bytes, name_);
  info_ = parse_header(state_->header, got, info_.file_bytes, name_, false);
  if (sodium_memcmp(info_.key_id.data(), key.id().data(), key_id_bytes) != 0) {
    fail(ErrorCategory::invalid_argument, "'", name_, "' was encrypted with another key (key id ",
         to_hex(info_.key_id), "; the key given has id ", key.id_hex(), ")");
  }
  if (crypto_secretstream_xchacha20poly1305_init_pull(&state_->stream, state_->header + 32, key.material()) != 0) {
    fail(ErrorCategory::corrupt_data, "'", name_, "': its encryption header is invalid");
  }
  sealed_.resize(info_.chunk_bytes + chunk_overhead);
  plain_.resize(info_.chunk_bytes);
  plain_.clear();
}

bool DecryptingReader::next_chunk() {
  if (finished_) return false;
  const std::size_t got = source_->read(sealed_.data(), sealed_.size(), name_);
  if (got == 0) {
    fail(ErrorCategory::corrupt_data, "'", name_, "' ends after ", chunk_index_,
         " chunk(s) without its final chunk: the file is truncated");
  }
  if (got < chunk_overhead) {
    fail(ErrorCategory::corrupt_data, "'", name_, "' is truncated inside chunk ", chunk_index_, " (", got,
         " bytes, fewer than a chunk's ", chunk_overhead, " bytes of tag and MAC)");
  }
  plain_.resize(info_.chunk_bytes);
  unsigned long long length = 0;
  unsigned char tag = 0;
  const unsigned char* ad = chunk_index_ == 0 ? state_->header : nullptr;
  if (crypto_secretstream_xchacha20poly1305_pull(&state_->stream, plain_.data(), &length, &tag, sealed_.data(), got, ad,
                                                 ad != nullptr ? header_bytes : 0) != 0) {
    plain_.clear();
    const bool short_chunk = got < sealed_.size();
    fail(ErrorCategory::corrupt_data, "'", name_, "': chunk ", chunk_index_, " fails authentication (",
         short_chunk ? "the file was truncated or appended to there, or the chunk was altered"
                     : "altered, moved from another place or another file",
         "); nothing from it is used");
  }
  plain_.resize(static_cast<std::size_t>(length));
  plain_at_ = 0;
  ++chunk_index_;
  if (tag == crypto_secretstream_xchacha20poly1305_TAG_FINAL) {
    unsigned char extra = 0;
    if (source_->read(&extra, 1, name_) != 0) {
      plain_.clear();
      fail(ErrorCategory::corrupt_data, "'", name_, "' has bytes after its final chunk (chunk ", chunk_index_ - 1,
           "): something was appended");
    }
    finished_ = true;
  } else if (got < sealed_.size()) {
    plain_.clear();
    fail(ErrorCategory::corrupt_data, "'", name_, "' ends inside chunk ", chunk_index_ - 1,
         " without its final chunk: the file is truncated");
  }
  return true;
}

std::size_t DecryptingReader::read(std::span<unsigned char> out) {
  // A reader that failed stays failed: the stream's state is past a chunk that did not verify.
  if (failed_) std::rethrow_exception(failed_);
  std::size_t given = 0;
  while (given < out.size()) {
    if (plain_at_ == plain_.size()) {
      // What this call has is handed on before the next chunk is verified: a failure there then
      // comes from a call that handed on nothing.
      if (given > 0 || finished_) break;
      try {
        if (!next_chunk()) break;
      } catch (...) {
        plain_.clear();
        plain_at_ = 0;
        failed_ = std::current_exception();
        throw;
      }
      continue;
    }
    const std::size_t take = std::min(out.size() - given, plain_.size() - plain_at_);
    std::memcpy(out.data() + given, plain_.data() + plain_at_, take);
    plain_at_ += take;
    given += take;
  }
  return given;
}

// ---- whole files ----------------------------------------------------------------------------

bool is_encrypted_file(const std::string& path) {
  Fd file(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  return file.get() >= 0 && is_encrypted_descriptor(file.get());
}

bool is_encrypted_descriptor(int fd) {
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) return false;
  unsigned char start[sizeof magic];
  return ::pread(fd, start, sizeof start, 0) == static_cast<ssize_t>(sizeof start) &&
         std::memcmp(start, magic, sizeof magic) == 0;
}

EncryptedFileInfo inspect_encrypted_file(const std::string& path) {
  ensure_sodium();
  Fd file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (file.get() < 0) fail(ErrorCategory::io, "cannot open '", path, "': ", std::strerror(errno));
  unsigned char header[header_bytes];
  const std::size_t got = read_fully(file.get(), header, header_bytes, path);
  return parse_header(header, got, file_size(file.get(), path), path, true);
}

std::uint64_t verify_encrypted_file(const std::string& path, const SecretKey& key) {
  DecryptingReader reader(path, key);
  std::vector<unsigned char> buffer(reader.info().chunk_bytes);
  const Wiped wiped{buffer};
  std::uint64_t total = 0;
  while (const std::size_t got = reader.read(buffer)) total += got;
  return total;
}

std::vector<unsigned char> read_encrypted_file(const std::string& path, const SecretKey& key) {
  DecryptingReader reader(path, key);
  std::vector<unsigned char> out(static_cast<std::size_t>(reader.info().plaintext_bytes));
  std::size_t got = 0;
  while (got < out.size()) {
    const std::size_t n = reader.read(std::span<unsigned char>(out).subspan(got));
    if (n == 0) break;
    got += n;
  }
  // The size came from the file's length: the reader must end exactly there, final chunk verified.
  unsigned char extra = 0;
  require(got == out.size() && reader.read({&extra, 1}) == 0, "'", path, "': decrypted ", got,
          " bytes, not the ", out.size(), " its size implies");
  return out;
}

namespace {

// Writes `path` + ".tmp" through `produce`, then renames it over path: the result appears whole or
// not at all.
template <class Produce>
void replace_atomically(const std::string& path, Produce&& produce) {
  const std::string temporary = path + ".tmp";
  ::unlink(temporary.c_str());  // a stale one, or one planted there: it is created afresh (O_EXCL)
  try {
    produce(temporary);
  } catch (...) {
    ::unlink(temporary.c_str());
    throw;
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(temporary.c_str());
    fail(ErrorCategory::io, "cannot rename '", temporary, "' to '", path, "': ", std::strerror(error));
  }
}

}  // namespace

void write_encrypted_file(const std::string& path, std::span<const unsigned char> bytes, const SecretKey& key,
                          std::size_t chunk_bytes) {
  replace_atomically(path, [&](const std::string& temporary) {
    EncryptingWriter writer(temporary, key, chunk_bytes);
    writer.write(bytes);
    writer.close();
  });
}

void encrypt_file(const std::string& plain, const std::string& encrypted, const SecretKey& key,
                  std::size_t chunk_bytes) {
  Fd in(::open(plain.c_str(), O_RDONLY | O_CLOEXEC));
  if (in.get() < 0) fail(ErrorCategory::io, "cannot open '", plain, "': ", std::strerror(errno));
  replace_atomically(encrypted, [&](const std::string& temporary) {
    EncryptingWriter writer(temporary, key, chunk_bytes);
    std::vector<unsigned char> buffer(chunk_bytes);
    for (;;) {
      const std::size_t got = read_fully(in.get(), buffer.data(), buffer.size(), plain);
      writer.write({buffer.data(), got});
      if (got < buffer.size()) break;
    }
    writer.close();
  });
}

void decrypt_file(const std::string& encrypted, const std::string& plain, const SecretKey& key, unsigned mode) {
  DecryptingReader reader(encrypted, key);
  replace_atomically(plain, [&](const std::string& temporary) {
    Fd out(loom::detail::open_owned_output(temporary, mode, true));
    std::vector<unsigned char> buffer(reader.info().chunk_bytes);
    const Wiped wiped{buffer};
    for (;;) {
      const std::size_t got = reader.read(buffer);
      if (got == 0) break;
      detail::write_fully(out.get(), buffer.data(), got, temporary);
    }
    if (::fsync(out.get()) != 0) fail(ErrorCategory::io, "cannot fsync '", temporary, "': ", std::strerror(errno));
  });
}

void rekey_file(const std::string& path, const SecretKey& from, const SecretKey& to) {
  DecryptingReader reader(path, from);
  replace_atomically(path, [&](const std::string& temporary) {
    EncryptingWriter writer(temporary, to, reader.info().chunk_bytes);
    std::vector<unsigned char> buffer(reader.info().chunk_bytes);
    const Wiped wiped{buffer};
    for (;;) {
      const std::size_t got = reader.read(buffer);
      if (got == 0) break;
      writer.write({buffer.data(), got});
    }
    writer.close();
  });
}

}  // namespace loom::crypt
