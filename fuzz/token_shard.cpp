// libFuzzer target: an llm.c token shard. Every input parses or is a loom::Error.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "loom/core/error.hpp"
#include "loom/data/token_shard.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    loom::data::parse_token_shard(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.bin");
  } catch (const loom::Error&) {
  }
  return 0;
}
