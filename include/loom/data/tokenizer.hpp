// Byte-level tokenizer: every byte of any text is one token (vocabulary 256), so any file can
// be trained on without a vocabulary file, and decoding is exact.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace loom::data {

class ByteTokenizer {
 public:
  static constexpr std::int64_t vocab_size = 256;
  std::vector<std::int32_t> encode(std::string_view text) const;
  // Throws an invalid_argument Error naming the first token outside [0, 256).
  std::string decode(std::span<const std::int32_t> tokens) const;
};

}  // namespace loom::data
