// BPE training on crafted counts: the most frequent pair merges first (ties to the smaller ids),
// the counts follow each merge, training stops at the size or below min_frequency, special tokens
// are not learnt from, and sizes that leave no room are refused.
#include <catch2/catch.hpp>

#include "loom/data/bpe_trainer.hpp"
#include "support/tensor_checks.hpp"

using loom::data::BpeTokenizer;
using loom::data::PieceCounts;

TEST_CASE("training merges the most frequent pair first and follows the counts", "[data]") {
  PieceCounts counts;
  // Pieces: "low" x1, " low" x2, " lower" x2, " newest" x1, as GPT-2's pattern cuts this text.
  counts.add("low low low lower lower newest", {});
  const BpeTokenizer t = loom::data::train_bpe(counts, {.vocab_size = 256 + 4, .specials = {}, .min_frequency = 2});
  REQUIRE(t.merges() == 4);
  // ('l', 'o') and ('o', 'w') occur 5 times: the tie goes to the smaller ids, 'l' before 'o'.
  // Then "lo" + "w" (5); then " " + "low" (4: " l" is gone into "low"); then, among the pairs
  // seen twice, ('e', 'r') has the smallest ids.
  CHECK(t.bytes_of(256) == "lo");
  CHECK(t.bytes_of(257) == "low");
  CHECK(t.bytes_of(258) == " low");
  CHECK(t.bytes_of(259) == "er");
  CHECK(t.encode("low lower") == std::vector<std::int32_t>{257, 258, 259});
}

TEST_CASE("training stops below min_frequency, skips special tokens and refuses sizes without room", "[data]") {
  PieceCounts counts;
  counts.add("ab<|endoftext|>ab", {"<|endoftext|>"});
  counts.add("cd", {"<|endoftext|>"});
  CHECK(counts.counts().at("ab") == 2);
  CHECK_FALSE(counts.counts().contains("<|endoftext|>"));
  const BpeTokenizer t = loom::data::train_bpe(counts, {.vocab_size = 300, .specials = {"<|endoftext|>"}, .min_frequency = 2});
  CHECK(t.merges() == 1);  // "cd" occurs once
  CHECK(t.vocab_size() == 256 + 1 + 1);
  CHECK(t.special_id("<|endoftext|>") == 257);
  REQUIRE_THROWS_MATCHES(loom::data::train_bpe(counts, {.vocab_size = 256, .specials = {"<|endoftext|>"}}), loom::Error,
                         loom::test::IsError(loom::ErrorCategory::invalid_argument, {"vocabulary of 256 leaves no room"}));
}
