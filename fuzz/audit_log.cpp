// libFuzzer target: an audit log (loom::audit's format) verified unkeyed and with a fixed key (the
// key of the keyed seed in corpus/audit_log: bytes 0, 1, ..., 31). Verification reports what it
// finds and never throws: any exception, a crash, a leak or a hang is a finding; so is a result
// that says it verified records past a problem.
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "loom/audit/audit_chain.hpp"
#include "loom/crypt/key.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const loom::crypt::SecretKey key = [] {
    std::array<unsigned char, loom::crypt::key_bytes> bytes{};
    for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(i);
    return loom::crypt::SecretKey::from_bytes(bytes);
  }();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (const loom::crypt::SecretKey* k : {static_cast<const loom::crypt::SecretKey*>(nullptr), &key}) {
    const loom::audit::VerifyResult r = loom::audit::verify_audit_text(text, k);
    // A problem names a line of the input; the records before it are fewer than the lines.
    if (r.problem && (r.problem->line == 0 || r.problem->line > size + 1 || r.records >= r.problem->line)) std::abort();
  }
  return 0;
}
