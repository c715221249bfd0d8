#include "loom/crypt/key.hpp"

#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "loom/core/error.hpp"
#include "src/core/unique_fd.hpp"

namespace loom::crypt {

namespace {

constexpr char file_prefix[] = "loom-key-1 ";
constexpr std::size_t prefix_length = sizeof(file_prefix) - 1;
constexpr char id_label[] = "loom key id 1";

// A buffer for key text on the stack, wiped whatever happens.
struct WipedBuffer {
  unsigned char bytes[256];
  ~WipedBuffer() { sodium_memzero(bytes, sizeof bytes); }
};

using loom::detail::Fd;

}  // namespace

void ensure_sodium() {
  static std::once_flag once;
  static int result = 0;
  std::call_once(once, [] { result = sodium_init(); });
  require(result >= 0, "libsodium could not be initialised (sodium_init returned ", result, ")");
}

std::string to_hex(std::span<const unsigned char> bytes) {
  std::string out(bytes.size() * 2 + 1, '\0');
  sodium_bin2hex(out.data(), out.size(), bytes.data(), bytes.size());
  out.pop_back();
  return out;
}

SecretKey::SecretKey() {
  ensure_sodium();
  // Guarded, locked memory (sodium_malloc); a failure to lock is not fatal to libsodium, but a
  // failure to allocate is.
  material_ = static_cast<unsigned char*>(sodium_malloc(key_bytes));
  if (material_ == nullptr) fail(ErrorCategory::out_of_memory, "secret key: sodium_malloc failed");
}

SecretKey::SecretKey(SecretKey&& other) noexcept : material_(other.material_), id_(other.id_) {
  other.material_ = nullptr;
}

SecretKey& SecretKey::operator=(SecretKey&& other) noexcept {
  if (this != &other) {
    if (material_ != nullptr) sodium_free(material_);
    material_ = other.material_;
    id_ = other.id_;
    other.material_ = nullptr;
  }
  return *this;
}

SecretKey::~SecretKey() {
  if (material_ != nullptr) sodium_free(material_);  // wipes before freeing
}

void SecretKey::compute_id() {
  crypto_generichash(id_.data(), id_.size(), reinterpret_cast<const unsigned char*>(id_label), sizeof(id_label) - 1,
                     material_, key_bytes);
}

SecretKey SecretKey::generate() {
  SecretKey key;
  crypto_secretstream_xchacha20poly1305_keygen(key.material_);
  key.compute_id();
  return key;
}

SecretKey SecretKey::from_bytes(std::span<const unsigned char, key_bytes> bytes) {
  SecretKey key;
  std::memcpy(key.material_, bytes.data(), key_bytes);
  key.compute_id();
  return key;
}

SecretKey SecretKey::load(const std::string& path) {
  ensure_sodium();
  Fd file(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (file.get() < 0) {
    const int error = errno;
    require(error != ELOOP, "key file '", path, "' is a symbolic link; give the key file itself");
    fail(ErrorCategory::io, "cannot open key file '", path, "': ", std::strerror(error));
  }
  struct stat info {};
  if (::fstat(file.get(), &info) != 0) fail(ErrorCategory::io, "cannot stat key file '", path, "': ", std::strerror(errno));
  require(S_ISREG(info.st_mode), "key file '", path, "' is not a regular file");
  const unsigned mode = info.st_mode & 07777;
  if ((mode & 077) != 0) {
    char octal[8];
    std::snprintf(octal, sizeof octal, "%04o", mode);
    fail(ErrorCategory::invalid_argument, "key file '", path, "' has mode ", octal,
         ": group or others may read or write it, so it is refused (as ssh refuses such a private key); "
         "run: chmod 600 '", path, "'");
  }
  WipedBuffer text;
  std::size_t length = 0;
  for (;;) {
    const ssize_t n = ::read(file.get(), text.bytes + length, sizeof text.bytes - length);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(ErrorCategory::io, "cannot read key file '", path, "': ", std::strerror(errno));
    if (n == 0) break;
    length += static_cast<std::size_t>(n);
    require(length < sizeof text.bytes, "key file '", path, "' is longer than a key file (",
            prefix_length + 2 * key_bytes + 1, " bytes)");
  }
  while (length > 0 && (text.bytes[length - 1] == '\n' || text.bytes[length - 1] == '\r')) --length;
  const bool prefixed = length >= prefix_length && std::memcmp(text.bytes, file_prefix, prefix_length) == 0;
  require(prefixed && length == prefix_length + 2 * key_bytes, "key file '", path,
          "' is not a loom key file (expected one line 'loom-key-1 ' and 64 hex digits; make one with "
          "loom-crypt keygen)");
  SecretKey key;
  std::size_t decoded = 0;
  const int parsed = sodium_hex2bin(key.material_, key_bytes, reinterpret_cast<const char*>(text.bytes + prefix_length),
                                    2 * key_bytes, nullptr, &decoded, nullptr);
  require(parsed == 0 && decoded == key_bytes, "key file '", path, "' has characters that are not hex digits");
  key.compute_id();
  return key;
}

std::optional<SecretKey> SecretKey::from_flag_or_environment(const std::string& path) {
  if (!path.empty()) return load(path);
  const char* from_environment = std::getenv("LOOM_KEY_FILE");
  if (from_environment == nullptr || *from_environment == '\0') return std::nullopt;
  return load(from_environment);
}

void SecretKey::save(const std::string& path) const {
  Fd file(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (file.get() < 0) {
    const int error = errno;
    require(error != EEXIST, "key file '", path, "' exists; a key is never overwritten (remove it first)");
    fail(ErrorCategory::io, "cannot create key file '", path, "': ", std::strerror(error));
  }
  ::fchmod(file.get(), 0600);  // whatever the umask left
  WipedBuffer text;
  std::memcpy(text.bytes, file_prefix, prefix_length);
  sodium_bin2hex(reinterpret_cast<char*>(text.bytes + prefix_length), 2 * key_bytes + 1, material_, key_bytes);
  text.bytes[prefix_length + 2 * key_bytes] = '\n';
  const std::size_t length = prefix_length + 2 * key_bytes + 1;
  const bool written = ::write(file.get(), text.bytes, length) == static_cast<ssize_t>(length) && ::fsync(file.get()) == 0;
  if (!written) {
    const int error = errno;
    ::unlink(path.c_str());
    fail(ErrorCategory::io, "cannot write key file '", path, "': ", std::strerror(error));
  }
}

}  // namespace loom::crypt
