// GPT-2's pre-tokenizer pattern, coded by hand over Unicode classes (no regex engine needed; the
// alternatives are tried in the pattern's order at each position, as a backtracking engine does),
// and GPT-2's byte-to-unicode alphabet.
#include <array>

#include "loom/data/bpe_tokenizer.hpp"
#include "unicode_classes.hpp"

namespace loom::data {

namespace {

using unicode::CharClass;

struct Char {
  std::size_t offset;  // in bytes
  char32_t code;
  CharClass klass;
};

// UTF-8 decoding; a byte that does not start a valid, shortest-form sequence is a character of
// its own ("other"), so that every byte of any input lands in some piece.
std::vector<Char> decode_utf8(std::string_view text) {
  std::vector<Char> chars;
  chars.reserve(text.size());
  std::size_t i = 0;
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  while (i < text.size()) {
    const unsigned char b = byte(i);
    std::size_t length = 0;
    char32_t code = 0, minimum = 0;
    if (b < 0x80) {
      length = 1, code = b;
    } else if (b >= 0xC2 && b < 0xE0) {
      length = 2, code = b & 0x1F, minimum = 0x80;
    } else if (b >= 0xE0 && b < 0xF0) {
      length = 3, code = b & 0x0F, minimum = 0x800;
    } else if (b >= 0xF0 && b < 0xF5) {
      length = 4, code = b & 0x07, minimum = 0x10000;
    }
    bool valid = length > 0 && i + length <= text.size();
    for (std::size_t k = 1; valid && k < length; ++k) {
      valid = (byte(i + k) & 0xC0) == 0x80;
      code = (code << 6) | (byte(i + k) & 0x3F);
    }
    valid = valid && code >= minimum && code <= 0x10FFFF && !(code >= 0xD800 && code <= 0xDFFF);
    if (!valid) {
      chars.push_back({i, 0xFFFD, CharClass::other});
      i += 1;
      continue;
    }
    chars.push_back({i, code, unicode::classify(code)});
    i += length;
  }
  return chars;
}

// The contraction at chars[i] ('s 't 're 've 'm 'll 'd, case-sensitive), as a count of characters; 0: none.
std::size_t contraction(const std::vector<Char>& c, std::size_t i) {
  if (c[i].code != U'\'' || i + 1 >= c.size()) return 0;
  const char32_t a = c[i + 1].code, b = i + 2 < c.size() ? c[i + 2].code : 0;
  if (a == U's' || a == U't' || a == U'm' || a == U'd') return 2;
  if ((a == U'r' && b == U'e') || (a == U'v' && b == U'e') || (a == U'l' && b == U'l')) return 3;
  return 0;
}

}  // namespace

std::vector<std::string_view> gpt2_pieces(std::string_view text) {
  const std::vector<Char> c = decode_utf8(text);
  const std::size_t n = c.size();
  std::vector<std::string_view> pieces;
  const auto run = [&](std::size_t from, CharClass k) {  // the end of a run of class k from `from`
    while (from < n && c[from].klass == k) ++from;
    return from;
  };
  const auto offset = [&](std::size_t i) { return i < n ? c[i].offset : text.size(); };
  std::size_t i = 0;
  while (i < n) {
    std::size_t end = 0;
    const bool space_first = c[i].code == U' ' && i + 1 < n;
    if (const std::size_t k = contraction(c, i)) {
      end = i + k;  // 's|'t|'re|'ve|'m|'ll|'d
    } else if (c[i].klass == CharClass::letter || (space_first && c[i + 1].klass == CharClass::letter)) {
      end = run(c[i].klass == CharClass::letter ? i : i + 1, CharClass::letter);  // ' ?\p{L}+'
    } else if (c[i].klass == CharClass::number || (space_first && c[i + 1].klass == CharClass::number)) {
      end = run(c[i].klass == CharClass::number ? i : i + 1, CharClass::number);  // ' ?\p{N}+'
    } else if (c[i].klass == CharClass::other || (space_first && c[i + 1].klass == CharClass::other)) {
      end = run(c[i].klass == CharClass::other ? i : i + 1, CharClass::other);  // ' ?[^\s\p{L}\p{N}]+'
    } else {
      // White space: '\s+(?!\S)' takes the run, or all of it but the last character when a
      // non-space follows (that one goes with the next piece); a single one then is '\s+'.
      const std::size_t j = run(i, CharClass::space);
      end = j == n || j - i == 1 ? j : j - 1;
    }
    pieces.emplace_back(text.substr(offset(i), offset(end) - offset(i)));
    i = end;
  }
  return pieces;
}

namespace {

struct Alphabet {
  std::array<std::string, 256> spelled;
  std::array<char32_t, 256> code{};
  Alphabet() {
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      code[static_cast<std::size_t>(b)] = printable ? static_cast<char32_t>(b) : next++;
    }
    for (int b = 0; b < 256; ++b) {
      const char32_t u = code[static_cast<std::size_t>(b)];  // below U+0800: one or two bytes
      std::string& s = spelled[static_cast<std::size_t>(b)];
      if (u < 0x80) {
        s.push_back(static_cast<char>(u));
      } else {
        s.push_back(static_cast<char>(0xC0 | (u >> 6)));
        s.push_back(static_cast<char>(0x80 | (u & 0x3F)));
      }
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet a;
  return a;
}

}  // namespace

const std::string& byte_to_unicode(std::uint8_t b) { return alphabet().spelled[b]; }

std::optional<std::string> unicode_to_bytes(std::string_view spelled) {
  static const std::array<int, 512> back = [] {
    std::array<int, 512> table{};
    table.fill(-1);
    for (int b = 0; b < 256; ++b) table[alphabet().code[static_cast<std::size_t>(b)]] = b;
    return table;
  }();
  std::string bytes;
  for (const Char& ch : decode_utf8(spelled)) {
    if (ch.klass == CharClass::other && ch.code == 0xFFFD) {
      // A stray byte (or a real U+FFFD): neither is in the alphabet.
      return std::nullopt;
    }
    if (ch.code >= back.size() || back[ch.code] < 0) return std::nullopt;
    bytes.push_back(static_cast<char>(back[ch.code]));
  }
  return bytes;
}

}  // namespace loom::data
