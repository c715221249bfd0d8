// The character classes GPT-2's pre-tokenizer pattern tells apart: letters (\p{L}), numbers
// (\p{N}), white space (\s as Oniguruma and tiktoken match it) and everything else. The ranges
// are generated from Unicode's tables (scripts/gen-unicode-classes.py); ASCII is answered inline.
#pragma once

#include <cstdint>

namespace loom::data::unicode {

enum class CharClass : std::uint8_t { other, letter, number, space };

CharClass classify_table(char32_t c);

inline CharClass classify(char32_t c) {
  if (c < 0x80) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return CharClass::letter;
    if (c >= '0' && c <= '9') return CharClass::number;
    if (c == ' ' || (c >= 0x09 && c <= 0x0D)) return CharClass::space;
    return CharClass::other;
  }
  return classify_table(c);
}

}  // namespace loom::data::unicode
