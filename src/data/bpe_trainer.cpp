#include "loom/data/bpe_trainer.hpp"

#include <queue>
#include <unordered_set>

#include "loom/core/error.hpp"

namespace loom::data {

void PieceCounts::add(std::string_view text, const std::vector<std::string>& specials) {
  for (const std::string& special : specials) require(!special.empty(), "BPE training: a special token is empty");
  // Special tokens are not text to learn from: the text between them is counted.
  std::size_t from = 0;
  while (from <= text.size()) {
    std::size_t at = std::string_view::npos, length = 0;
    for (const std::string& special : specials) {
      const std::size_t found = text.find(special, from);
      if (found < at) at = found, length = special.size();
    }
    const std::size_t end = at == std::string_view::npos ? text.size() : at;
    for (const std::string_view piece : gpt2_pieces(text.substr(from, end - from))) ++counts_[std::string(piece)];
    if (at == std::string_view::npos) break;
    from = at + length;
  }
}

void PieceCounts::merge(const PieceCounts& other) {
  for (const auto& [piece, count] : other.counts_) counts_[piece] += count;
}

namespace {

std::uint64_t key(std::int32_t a, std::int32_t b) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
}

struct Word {
  std::vector<std::int32_t> symbols;
  std::int64_t count;
};

}  // namespace

BpeTokenizer train_bpe(const PieceCounts& pieces, const BpeTrainOptions& options) {
  const auto specials = static_cast<std::int64_t>(options.specials.size());
  require(options.vocab_size >= 256 + specials, "BPE training: a vocabulary of ", options.vocab_size,
          " leaves no room: it holds the 256 bytes and ", specials, " special tokens at least");
  require(options.min_frequency >= 1, "BPE training: min_frequency must be at least 1, got ", options.min_frequency);
  const std::int64_t wanted = options.vocab_size - 256 - specials;
  // Symbols are byte values first, then each new token; `spelling` gives their bytes.
  std::vector<std::string> spelling;
  std::unordered_map<std::string, std::int32_t> symbol_of;
  for (int b = 0; b < 256; ++b) {
    spelling.emplace_back(1, static_cast<char>(b));
    symbol_of.emplace(spelling.back(), b);
  }
  std::vector<Word> words;
  words.reserve(pieces.counts().size());
  for (const auto& [piece, count] : pieces.counts()) {
    Word w{{}, count};
    for (const char c : piece) w.symbols.push_back(static_cast<unsigned char>(c));
    if (w.symbols.size() > 1) words.push_back(std::move(w));
  }
  std::unordered_map<std::uint64_t, std::int64_t> pair_count;
  std::unordered_map<std::uint64_t, std::unordered_set<std::size_t>> where;
  for (std::size_t i = 0; i < words.size(); ++i) {
    const Word& w = words[i];
    for (std::size_t j = 0; j + 1 < w.symbols.size(); ++j) {
      const std::uint64_t k = key(w.symbols[j], w.symbols[j + 1]);
      pair_count[k] += w.count;
      where[k].insert(i);
    }
  }
  // A lazy max-heap: entries are checked against the current count when they come out.
  using Entry = std::pair<std::int64_t, std::uint64_t>;
  const auto later = [](const Entry& x, const Entry& y) { return x.first != y.first ? x.first < y.first : x.second > y.second; };
  std::priority_queue<Entry, std::vector<Entry>, decltype(later)> heap(later);
  for (const auto& [k, count] : pair_count) heap.emplace(count, k);
  std::vector<std::pair<std::string, std::string>> merges;
  // Until the vocabulary has its size: a merge that spells a token made before adds no token.
  while (static_cast<std::int64_t>(spelling.size()) - 256 < wanted && !heap.empty()) {
    const auto [count, k] = heap.top();
    heap.pop();
    const auto current = pair_count.find(k);
    if (current == pair_count.end() || current->second != count) continue;  // stale
    if (count < options.min_frequency) break;
    const auto a = static_cast<std::int32_t>(k >> 32), b = static_cast<std::int32_t>(k & 0xffffffffu);
    merges.emplace_back(spelling[static_cast<std::size_t>(a)], spelling[static_cast<std::size_t>(b)]);
    // Two merges can spell the same token ("ab c" and "a bc"): it keeps one id, as in Hugging Face's.
    const std::string joined = spelling[static_cast<std::size_t>(a)] + spelling[static_cast<std::size_t>(b)];
    const auto [known, fresh] = symbol_of.try_emplace(joined, static_cast<std::int32_t>(spelling.size()));
    const std::int32_t merged = known->second;
    if (fresh) spelling.push_back(joined);
    std::unordered_map<std::uint64_t, std::int64_t> changed;  // pair -> count delta
    const std::unordered_set<std::size_t> affected = std::move(where[k]);
    where.erase(k);
    for (const std::size_t i : affected) {
      Word& w = words[i];
      std::vector<std::int32_t>& s = w.symbols;
      for (std::size_t j = 0; j + 1 < s.size(); ++j) changed[key(s[j], s[j + 1])] -= w.count;
      std::vector<std::int32_t> next;
      next.reserve(s.size());
      for (std::size_t j = 0; j < s.size(); ++j) {
        if (j + 1 < s.size() && s[j] == a && s[j + 1] == b) {
          next.push_back(merged);
          ++j;
        } else {
          next.push_back(s[j]);
        }
      }
      s = std::move(next);
      for (std::size_t j = 0; j + 1 < s.size(); ++j) {
        const std::uint64_t p = key(s[j], s[j + 1]);
        changed[p] += w.count;
        where[p].insert(i);
      }
    }
    for (const auto& [p, delta] : changed) {
      if (delta == 0) continue;
      std::int64_t& c = pair_count[p];
      c += delta;
      if (c <= 0) {
        pair_count.erase(p);
      } else {
        heap.emplace(c, p);
      }
    }
    pair_count.erase(k);
  }
  return BpeTokenizer::from_merges(merges, options.specials);
}

}  // namespace loom::data
