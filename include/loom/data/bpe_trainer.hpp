// Trains a GPT-2 style byte-level BPE vocabulary from a user's text (`loom-tokenize train`), since
// nothing can be downloaded where loom often runs. Text is cut into GPT-2's pieces (special tokens
// first taken out), the pieces are counted, and merges are learnt greedily: the most frequent
// adjacent pair in the counted pieces becomes the next merge, ties going to the pair made first
// (bytes by value, then merged tokens in the order they were made), until the vocabulary has its
// size or no pair occurs `min_frequency` times. The result
// holds the 256 bytes, the merges and the special tokens, and saves as Hugging Face's files.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "loom/data/bpe_tokenizer.hpp"

namespace loom::data {

struct BpeTrainOptions {
  std::int64_t vocab_size = 50257;  // bytes + merges + special tokens
  std::vector<std::string> specials = {"<|endoftext|>"};
  std::int64_t min_frequency = 2;
};

// Piece counts of some text; counts from several threads add up with merge().
class PieceCounts {
 public:
  void add(std::string_view text, const std::vector<std::string>& specials);
  void merge(const PieceCounts& other);
  const std::unordered_map<std::string, std::int64_t>& counts() const noexcept { return counts_; }

 private:
  std::unordered_map<std::string, std::int64_t> counts_;
};

// An invalid_argument Error when the size leaves no room (below 256 + the specials), or a special
// token is empty or named twice.
BpeTokenizer train_bpe(const PieceCounts& pieces, const BpeTrainOptions& options);

}  // namespace loom::data
