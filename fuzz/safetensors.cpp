// libFuzzer target: safetensors bytes. Every input parses or is a loom::Error; anything else
// (another exception, a crash, a leak, a hang) is a finding.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "loom/core/error.hpp"
#include "loom/io/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    loom::io::parse_safetensors(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.safetensors");
  } catch (const loom::Error&) {
  }
  return 0;
}
