// libFuzzer target: a checkpoint's state.json. Every input parses or is a loom::Error.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "loom/core/error.hpp"
#include "src/io/checkpoint_manifest.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    loom::io::detail::parse_manifest(std::string_view(reinterpret_cast<const char*>(data), size), "state.json");
  } catch (const loom::Error&) {
  }
  return 0;
}
