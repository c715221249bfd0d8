// libFuzzer target: a vocab.json and a merges.txt (the input split at the first NUL byte), then,
// when they load, the input itself encoded with them. Every input loads or is a loom::Error, and
// whatever loads encodes any bytes so that decoding gives them back.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "loom/core/error.hpp"
#include "loom/data/bpe_tokenizer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::size_t split = input.find('\0');
  const std::string_view vocab = input.substr(0, split);
  const std::string_view merges = split == std::string_view::npos ? std::string_view() : input.substr(split + 1);
  try {
    const auto tokenizer = loom::data::BpeTokenizer::from_vocab_merges(vocab, merges, "fuzz");
    if (tokenizer.decode(tokenizer.encode(input)) != input) std::abort();
  } catch (const loom::Error&) {
  }
  return 0;
}
