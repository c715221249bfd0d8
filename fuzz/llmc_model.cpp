// libFuzzer target: an llm.c GPT-2 model file. Every input parses or is a loom::Error.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "loom/convert/llmc_gpt2.hpp"
#include "loom/core/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    loom::convert::parse_llmc_gpt2(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.bin");
  } catch (const loom::Error&) {
  }
  return 0;
}
