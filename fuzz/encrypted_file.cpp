// libFuzzer target: an encrypted file (loom::crypt's format) read with a fixed key, the key of
// the seeds in corpus/encrypted_file (bytes 0, 1, ..., 31). Reading it to the end either gives
// plaintext or is a loom::Error; anything else (another exception, a crash, a leak, a hang, a
// read past the input) is a finding.
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "loom/core/error.hpp"
#include "loom/crypt/encrypted_file.hpp"
#include "loom/crypt/key.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const loom::crypt::SecretKey key = [] {
    std::array<unsigned char, loom::crypt::key_bytes> bytes{};
    for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(i);
    return loom::crypt::SecretKey::from_bytes(bytes);
  }();
  try {
    loom::crypt::DecryptingReader reader(std::span<const unsigned char>(data, size), key, "fuzz input");
    std::vector<unsigned char> out(3000);
    while (reader.read(out) > 0) {
    }
  } catch (const loom::Error&) {
  }
  return 0;
}
