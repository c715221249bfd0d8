// Secret keys for loom's encryption at rest (libsodium; no home-made cryptography).
//
// A key is 32 random bytes held in libsodium's guarded memory: locked in RAM (never swapped),
// fenced by guard pages, and wiped when the key is destroyed. It is identified by a keyed hash
// (BLAKE2b keyed with the key over a fixed label), never by the key itself, so an encrypted file
// can say which key it needs and a wrong key is reported as a wrong key, not as corruption.
//
// A key file is one line, "loom-key-1 <64 hex digits>", readable and writable by its owner only:
// like ssh with a private key, loading refuses a file that its group or others may read or write.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <span>
#include <string>

namespace loom::crypt {

// Initialises libsodium once per process (thread-safe); every entry point of loom::crypt calls it.
void ensure_sodium();

inline constexpr std::size_t key_bytes = 32;
inline constexpr std::size_t key_id_bytes = 16;
using KeyId = std::array<unsigned char, key_id_bytes>;
std::string to_hex(std::span<const unsigned char> bytes);

class SecretKey {
 public:
  // 32 bytes from the operating system's random source.
  static SecretKey generate();
  // A key from its 32 bytes (the caller wipes its copy): for keys derived or kept elsewhere.
  static SecretKey from_bytes(std::span<const unsigned char, key_bytes> bytes);
  // Reads a key file; Error (invalid_argument) naming the path when its mode lets group or others
  // in, when it is not a regular file, or when its contents are not a key; io Error when unreadable.
  static SecretKey load(const std::string& path);
  // The key to use: `path` when given, else the file named by LOOM_KEY_FILE; none when neither is set.
  static std::optional<SecretKey> from_flag_or_environment(const std::string& path);

  SecretKey(SecretKey&& other) noexcept;
  SecretKey& operator=(SecretKey&& other) noexcept;
  SecretKey(const SecretKey&) = delete;
  SecretKey& operator=(const SecretKey&) = delete;
  ~SecretKey();  // wipes and frees the key's memory

  // Writes the key as a new key file with mode 0600; refuses to replace an existing file.
  void save(const std::string& path) const;

  const unsigned char* material() const noexcept { return material_; }
  const KeyId& id() const noexcept { return id_; }
  std::string id_hex() const { return to_hex(id_); }

 private:
  SecretKey();  // guarded memory, not yet filled
  void compute_id();
  unsigned char* material_ = nullptr;
  KeyId id_{};
};

}  // namespace loom::crypt
