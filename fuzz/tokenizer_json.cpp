// libFuzzer target: a Hugging Face tokenizer.json. Every input loads or is a loom::Error, and
// whatever loads encodes the input itself so that decoding gives it back.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "loom/core/error.hpp"
#include "loom/data/bpe_tokenizer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  try {
    const auto tokenizer = loom::data::BpeTokenizer::from_tokenizer_json(input, "fuzz.json");
    if (tokenizer.decode(tokenizer.encode(input)) != input) std::abort();
  } catch (const loom::Error&) {
  }
  return 0;
}
