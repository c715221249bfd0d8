// GPT-2's byte-level BPE on crafted vocabularies (the Python test checks it against Hugging Face
// tokenizers): merges apply by rank, the leftmost first among equals; special tokens are cut out
// before the pattern; any bytes round-trip; tokenizer.json and vocab.json + merges.txt give the
// same tokenizer, and save() writes files that load back to it; damaged vocabularies are named.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <unistd.h>
#include <vector>

#include "loom/data/bpe_tokenizer.hpp"
#include "loom/data/bpe_trainer.hpp"
#include "support/tensor_checks.hpp"

using loom::ErrorCategory;
using loom::data::BpeTokenizer;
using loom::test::IsError;
using Ids = std::vector<std::int32_t>;

namespace {

// 256 bytes, then he, ll, hell, hello, aa, "Ġw" ... as merges in that rank order.
BpeTokenizer crafted() {
  return BpeTokenizer::from_merges({{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {"a", "a"}, {" ", "w"}},
                                   {"<|endoftext|>"});
}

std::int32_t id(const BpeTokenizer& t, const std::string& bytes) {
  const auto found = t.id_of(bytes);
  REQUIRE(found.has_value());
  return *found;
}

}  // namespace

TEST_CASE("merges apply by rank, the leftmost first among equals", "[data]") {
  const BpeTokenizer t = crafted();
  CHECK(t.vocab_size() == 256 + 6 + 1);
  CHECK(t.encode("hello") == Ids{id(t, "hello")});
  CHECK(t.encode("help") == Ids{id(t, "he"), id(t, "l"), id(t, "p")});
  // (a, a) three times over: the leftmost pair merges, the last a stays alone.
  CHECK(t.encode("aaa") == Ids{id(t, "aa"), id(t, "a")});
  CHECK(t.encode("aaaa") == Ids{id(t, "aa"), id(t, "aa")});
  // " w" merges inside the piece " world"; pieces never merge across each other.
  CHECK(t.encode("hello world") == Ids{id(t, "hello"), id(t, " w"), id(t, "o"), id(t, "r"), id(t, "l"), id(t, "d")});
  // GPT-2's order of the bytes, its vocabulary's ids: '!' (the first printable) is 0, and a space
  // ("Ġ", the 33rd byte after the 188 printable ones) is 220.
  CHECK(t.encode("!") == Ids{0});
  CHECK(t.encode(" ") == Ids{220});
}

TEST_CASE("special tokens are cut out first, and every byte string round-trips", "[data]") {
  const BpeTokenizer t = crafted();
  const std::int32_t eot = *t.special_id("<|endoftext|>");
  CHECK(eot == 262);
  CHECK(t.encode("hello<|endoftext|>hello") == Ids{id(t, "hello"), eot, id(t, "hello")});
  CHECK(t.encode("<|endoftext|><|endoftext|>") == Ids{eot, eot});
  CHECK(t.encode_ordinary("<|endoftext|>").size() > 1);  // as text
  std::string bytes;
  for (int b = 0; b < 256; ++b) bytes.push_back(static_cast<char>(255 - b));
  bytes += "hello \xff\xfe<|endoftext|> aaa\r\n\t\xe6\x97";
  CHECK(t.decode(t.encode(bytes)) == bytes);
  CHECK_THROWS_MATCHES(t.decode(Ids{1, 263}), loom::Error,
                       IsError(ErrorCategory::invalid_argument, {"id 263 at position 1", "[0, 263)"}));
}

TEST_CASE("saved files load back to the same tokenizer, in both formats", "[data]") {
  const BpeTokenizer t = crafted();
  const auto dir = std::filesystem::temp_directory_path() / ("loom_test_bpe_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  t.save(dir.string());
  const BpeTokenizer from_json = BpeTokenizer::load((dir / "tokenizer.json").string());
  std::filesystem::remove(dir / "tokenizer.json");
  const BpeTokenizer from_files = BpeTokenizer::load(dir.string());  // vocab.json + merges.txt
  std::filesystem::remove_all(dir);
  const std::string text = "hello world, aaa help<|endoftext|>\xff";
  for (const BpeTokenizer* loaded : {&from_json, &from_files}) {
    CHECK(loaded->vocab_size() == t.vocab_size());
    CHECK(loaded->merges() == t.merges());
    CHECK(loaded->encode(text) == t.encode(text));
    CHECK(loaded->special_id("<|endoftext|>") == t.special_id("<|endoftext|>"));
  }
}

TEST_CASE("damaged vocabularies are named", "[data]") {
  const BpeTokenizer t = crafted();
  const std::string vocab = t.vocab_json(), merges = t.merges_txt();
  REQUIRE_THROWS_MATCHES(BpeTokenizer::from_vocab_merges(vocab, merges + "Ġ zz\n", "v"), loom::Error,
                         IsError(ErrorCategory::corrupt_data, {"merge 7", "unknown token 'zz'"}));
  REQUIRE_THROWS_MATCHES(BpeTokenizer::from_vocab_merges(vocab, merges + "a b\n", "v"), loom::Error,
                         IsError(ErrorCategory::corrupt_data, {"merge 7 'a b' makes 'ab'", "not in the vocabulary"}));
  REQUIRE_THROWS_MATCHES(BpeTokenizer::from_vocab_merges(vocab, merges + "abc\n", "v"), loom::Error,
                         IsError(ErrorCategory::corrupt_data, {"'abc' is not two tokens"}));
  REQUIRE_THROWS_MATCHES(BpeTokenizer::from_vocab_merges("{\"a\": 0, \"b\": 1}", "", "v"), loom::Error,
                         IsError(ErrorCategory::corrupt_data, {"no token for byte 0x", "all 256"}));
  REQUIRE_THROWS_MATCHES(BpeTokenizer::from_vocab_merges("{\"a\": 0, \"b\": 5}", "", "v"), loom::Error,
                         IsError(ErrorCategory::corrupt_data, {"token 'b' has id 5", "0..1 each once"}));
  REQUIRE_THROWS_MATCHES(BpeTokenizer::from_vocab_merges("{\"a\": 0, \"\\u0200\": 1}", "", "v"), loom::Error,
                         IsError(ErrorCategory::corrupt_data, {"not spelled in GPT-2's byte-level alphabet"}));
  REQUIRE_THROWS_MATCHES(BpeTokenizer::from_vocab_merges("{\"a\": 0,", "", "v"), loom::Error,
                         IsError(ErrorCategory::corrupt_data, {"not valid JSON"}));
  REQUIRE_THROWS_MATCHES(BpeTokenizer::from_tokenizer_json("{\"model\": {\"type\": \"WordPiece\"}}", "t.json"),
                         loom::Error, IsError(ErrorCategory::invalid_argument, {"WordPiece", "byte-level BPE"}));
  REQUIRE_THROWS_MATCHES(
      BpeTokenizer::from_tokenizer_json("{\"model\": {\"type\": \"BPE\"}, \"pre_tokenizer\": {\"type\": \"Whitespace\"}}",
                                        "t.json"),
      loom::Error, IsError(ErrorCategory::invalid_argument, {"pre-tokenizes with Whitespace"}));
  // Found by fuzzing: fields of the wrong type, and a special added token without content.
  REQUIRE_THROWS_MATCHES(BpeTokenizer::from_tokenizer_json("{\"model\": {\"type\": null}}", "t.json"), loom::Error,
                         IsError(ErrorCategory::corrupt_data, {"t.json", "a field of the wrong type"}));
  const std::string no_content =
      "{\"added_tokens\": [{\"id\": 5, \"special\": true}], \"pre_tokenizer\": {\"type\": \"ByteLevel\"}, "
      "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}";
  REQUIRE_THROWS_MATCHES(BpeTokenizer::from_tokenizer_json(no_content, "t.json"), loom::Error,
                         IsError(ErrorCategory::corrupt_data, {"no token for byte"}));
  // Pre-tokenizers other than GPT-2's would give other ids than Hugging Face's: refused.
  const auto with_pre = [&](const std::string& pre, const std::string& normalizer = "null") {
    return "{\"normalizer\": " + normalizer + ", \"pre_tokenizer\": " + pre +
           ", \"model\": {\"type\": \"BPE\", \"vocab\": " + vocab + ", \"merges\": []}}";
  };
  CHECK(BpeTokenizer::from_tokenizer_json(with_pre("{\"type\": \"ByteLevel\"}"), "t.json").vocab_size() == t.vocab_size());
  REQUIRE_THROWS_MATCHES(
      BpeTokenizer::from_tokenizer_json(with_pre("{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\"}, "
                                                 "{\"type\": \"ByteLevel\", \"use_regex\": false}]}"), "t.json"),
      loom::Error, IsError(ErrorCategory::invalid_argument, {"pre-tokenizes with Sequence", "GPT-2's byte-level BPE only"}));
  REQUIRE_THROWS_MATCHES(
      BpeTokenizer::from_tokenizer_json(with_pre("{\"type\": \"ByteLevel\", \"use_regex\": false}"), "t.json"),
      loom::Error, IsError(ErrorCategory::invalid_argument, {"without GPT-2's pattern"}));
  REQUIRE_THROWS_MATCHES(
      BpeTokenizer::from_tokenizer_json(with_pre("{\"type\": \"ByteLevel\"}", "{\"type\": \"NFC\"}"), "t.json"),
      loom::Error, IsError(ErrorCategory::invalid_argument, {"normalizes text"}));
  // A merge may not make or use a special token; special tokens may not be empty or repeated.
  REQUIRE_THROWS_MATCHES(BpeTokenizer::from_vocab_merges(vocab, merges + "<|endoftext| >\n", "v"), loom::Error,
                         IsError(ErrorCategory::corrupt_data, {"unknown token '<|endoftext|'"}));
  REQUIRE_THROWS_MATCHES(BpeTokenizer::from_merges({}, {""}), loom::Error,
                         IsError(ErrorCategory::invalid_argument, {"a special token is empty"}));
  REQUIRE_THROWS_MATCHES(BpeTokenizer::from_merges({}, {"<s>", "<s>"}), loom::Error,
                         IsError(ErrorCategory::invalid_argument, {"'<s>' is named twice"}));
  REQUIRE_THROWS_MATCHES(BpeTokenizer::load("/nonexistent/tokenizer.json"), loom::Error,
                         IsError(ErrorCategory::io, {"cannot open '/nonexistent/tokenizer.json'"}));
}

TEST_CASE("a text cut at cut_point encodes as the whole", "[data]") {
  const std::vector<std::string> texts = {
      "Hello world's  end\n\n  x 123 !!  it's  I'll they're\t\ttabs\r\n and more words here.\n",
      "a<|endoftext|>b  <|endoftext|>\n\nc d  e\u00a0f \u3000g\n<x y> z <x y>\n",
      "   leading and trailing   ",
      "Ünïcödé 日本語のテキスト Привет мир ١٢٣ 3.14159 😀😀 café naïve   \n  done",
  };
  loom::data::PieceCounts counts;
  for (const std::string& t : texts) counts.add(t, {"<|endoftext|>", "<x y>"});
  loom::data::BpeTrainOptions options;
  options.vocab_size = 320;
  options.specials = {"<|endoftext|>", "<x y>"};
  options.min_frequency = 1;
  const BpeTokenizer tokenizer = loom::data::train_bpe(counts, options);
  std::size_t checked = 0;
  for (const std::string& text : texts) {
    const Ids whole = tokenizer.encode(text);
    for (std::size_t limit = 0; limit <= text.size(); ++limit) {
      const std::size_t n = tokenizer.cut_point(text, limit);
      REQUIRE(n <= limit);
      if (n == 0) continue;
      Ids parts = tokenizer.encode(std::string_view(text).substr(0, n));
      const Ids rest = tokenizer.encode(std::string_view(text).substr(n));
      parts.insert(parts.end(), rest.begin(), rest.end());
      INFO(text << " cut at " << n);
      REQUIRE(parts == whole);
      ++checked;
    }
  }
  CHECK(checked > 100);
  // No cut inside a special token that holds white space: "<x y>" stays whole.
  const std::string special = "ab<x y>";
  CHECK(tokenizer.cut_point(special, 5) == 0);
  CHECK(tokenizer.cut_point("ab cd", 4) == 2);
}
