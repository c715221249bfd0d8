#include "loom/data/tokenizer.hpp"

#include "loom/core/error.hpp"

namespace loom::data {

std::vector<std::int32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<std::int32_t> tokens;
  tokens.reserve(text.size());
  for (char c : text) tokens.push_back(static_cast<unsigned char>(c));
  return tokens;
}

std::string ByteTokenizer::decode(std::span<const std::int32_t> tokens) const {
  std::string text;
  text.reserve(tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    require(tokens[i] >= 0 && tokens[i] < vocab_size, "byte tokenizer: token ", tokens[i], " at position ", i,
            " is not a byte (0..255)");
    text.push_back(static_cast<char>(static_cast<unsigned char>(tokens[i])));
  }
  return text;
}

}  // namespace loom::data
