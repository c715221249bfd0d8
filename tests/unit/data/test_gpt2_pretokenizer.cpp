// GPT-2's pre-tokenizer pattern, coded by hand: the pieces of crafted texts are those of the
// pattern (as Hugging Face tokenizers 0.23's ByteLevel pre-tokenizer cuts them: contractions,
// optional leading spaces, runs of one class, white space that leaves its last character to the
// next piece); the pieces tile any input, UTF-8 or not; the byte alphabet is GPT-2's.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "loom/data/bpe_tokenizer.hpp"

using loom::data::gpt2_pieces;

namespace {

std::vector<std::string> pieces(const std::string& text) {
  std::vector<std::string> out;
  for (const auto piece : gpt2_pieces(text)) out.emplace_back(piece);
  return out;
}

using Pieces = std::vector<std::string>;

}  // namespace

TEST_CASE("GPT-2's pattern cuts text as Hugging Face's ByteLevel does", "[data]") {
  CHECK(pieces("Hello world's  end") == Pieces{"Hello", " world", "'s", " ", " end"});
  CHECK(pieces("it's I'll they're WE'VE ''s") ==
        Pieces{"it", "'s", " I", "'ll", " they", "'re", " WE", "'", "VE", " ''", "s"});
  CHECK(pieces("x   y\t\tz  ") == Pieces{"x", "  ", " y", "\t", "\t", "z", "  "});
  CHECK(pieces("abc123 4.5  !!?  \n\n  q") == Pieces{"abc", "123", " 4", ".", "5", " ", " !!?", "  \n\n ", " q"});
  CHECK(pieces("日本語 Привет١٢٣ ²½ e\u0301") == Pieces{"日本語", " Привет", "١٢٣", " ²½", " e", "\u0301"});
  CHECK(pieces(" a\u00a0b\u3000 c") == Pieces{" a", "\u00a0", "b", "\u3000", " c"});
  CHECK(pieces("").empty());
  CHECK(pieces(" ") == Pieces{" "});
}

TEST_CASE("the pieces tile any input, including bytes that are not UTF-8", "[data]") {
  const std::string bytes = "caf\xe9 \xff\xfe ok \xe6\x97\xa5\xe6 end\x80\xc0\xaf\xed\xa0\x80";
  std::string joined;
  for (const auto& p : pieces(bytes)) {
    CHECK_FALSE(p.empty());
    joined += p;
  }
  CHECK(joined == bytes);
  // A stray byte is a character of its own, of the "other" class: it joins a run of punctuation.
  CHECK(pieces("a\xff!b") == Pieces{"a", "\xff!", "b"});
}

TEST_CASE("GPT-2's byte alphabet maps printable bytes to themselves and the rest from U+0100", "[data]") {
  CHECK(loom::data::byte_to_unicode('A') == "A");
  CHECK(loom::data::byte_to_unicode(' ') == "\u0120");   // Ġ
  CHECK(loom::data::byte_to_unicode('\n') == "\u010a");  // Ċ
  CHECK(loom::data::byte_to_unicode(0) == "\u0100");
  CHECK(loom::data::byte_to_unicode(0xAD) == "\u0143");  // the soft hyphen is not printable
  std::string all;
  for (int b = 0; b < 256; ++b) all += loom::data::byte_to_unicode(static_cast<std::uint8_t>(b));
  const auto back = loom::data::unicode_to_bytes(all);
  REQUIRE(back.has_value());
  REQUIRE(back->size() == 256);
  for (int b = 0; b < 256; ++b) CHECK(static_cast<unsigned char>((*back)[static_cast<std::size_t>(b)]) == b);
  CHECK_FALSE(loom::data::unicode_to_bytes("\u0200").has_value());  // past the alphabet
}
