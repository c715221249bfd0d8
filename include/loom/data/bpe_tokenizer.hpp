// GPT-2's byte-level BPE, compatible with Hugging Face `tokenizers` (and so with tiktoken's `gpt2`,
// which uses the same pattern and merges): the same ids for any text, and a decode that gives back
// the text byte for byte.
//
// A vocabulary comes in Hugging Face's files: `vocab.json` with `merges.txt`, or one
// `tokenizer.json` (model BPE, pre-tokenizer ByteLevel). Tokens are spelled in GPT-2's byte-to-
// unicode alphabet: printable bytes stand for themselves and the others for U+0100 onwards (a
// space is "Ġ"). Loading keeps each token's raw bytes. It checks that all 256 bytes have a
// token and that every merge joins two known tokens into a third; either fault is a corrupt_data
// Error naming the file, the line or the token.
//
// Encoding first cuts out the special tokens (`<|endoftext|>`; tokenizer.json's special added
// tokens). The text between them is split with GPT-2's pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// which is coded by hand over the Unicode classes (unicode_classes.hpp). Each piece's bytes are
// then merged in rank order, the lowest-ranked adjacent pair first and the leftmost among equals,
// as Hugging Face does. Text that is not valid UTF-8 still encodes: each stray byte is a
// character of its own class ("other"), so decoding still restores it.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace loom::data {

// The largest n <= at_most (and short of text's end) at which text can be cut so that encoding
// text[0, n) and then text[n, end) gives encode(text), and counting their pieces counts text's:
// before an ASCII white-space byte that follows a printable ASCII byte (GPT-2's pattern always
// ends a piece there) and inside none of the special tokens. 0 when there is none. A long
// document is encoded or counted in parts cut there: in parallel, in bounded memory.
std::size_t gpt2_cut_point(std::string_view text, std::size_t at_most, std::span<const std::string> specials);

class BpeTokenizer {
 public:
  // vocab.json and merges.txt's contents (`name` is used in errors). Special tokens: those of
  // `specials` that the vocabulary holds (GPT-2's files carry <|endoftext|> in the vocabulary).
  static BpeTokenizer from_vocab_merges(std::string_view vocab_json, std::string_view merges_txt, const std::string& name,
                                        const std::vector<std::string>& specials = {"<|endoftext|>"});
  // tokenizer.json's contents; refuses other models and pre-tokenizers by name.
  static BpeTokenizer from_tokenizer_json(std::string_view json, const std::string& name);
  // A directory with tokenizer.json, or with vocab.json and merges.txt; or a tokenizer.json path.
  static BpeTokenizer load(const std::string& path);

  // A vocabulary built from its parts: `merges` in rank order, each pair's tokens given as raw
  // bytes; the ids are the 256 bytes first (in GPT-2's alphabet order), then each merge's result,
  // then the specials. What `loom-tokenize train` makes.
  static BpeTokenizer from_merges(const std::vector<std::pair<std::string, std::string>>& merges,
                                  const std::vector<std::string>& specials);

  std::vector<std::int32_t> encode(std::string_view text) const;           // special tokens recognised
  std::vector<std::int32_t> encode_ordinary(std::string_view text) const;  // special tokens as text
  // gpt2_cut_point with this vocabulary's special tokens.
  std::size_t cut_point(std::string_view text, std::size_t at_most) const {
    return gpt2_cut_point(text, at_most, special_tokens());
  }
  // Raw bytes; an invalid_argument Error naming the first id outside the vocabulary.
  std::string decode(std::span<const std::int32_t> ids) const;

  std::int64_t vocab_size() const noexcept { return static_cast<std::int64_t>(tokens_.size()); }
  std::optional<std::int32_t> id_of(std::string_view token_bytes) const;
  const std::string& bytes_of(std::int32_t id) const { return tokens_.at(static_cast<std::size_t>(id)); }
  std::optional<std::int32_t> special_id(std::string_view special) const;
  std::vector<std::string> special_tokens() const;
  std::size_t merges() const noexcept { return merges_.size(); }

  // Hugging Face's files, which `tokenizers` and `transformers` load: vocab.json, merges.txt and
  // tokenizer.json in `dir` (created if missing); an io Error naming a file it cannot write.
  void save(const std::string& dir) const;
  std::string vocab_json() const;
  std::string merges_txt() const;
  std::string tokenizer_json() const;

 private:
  BpeTokenizer() = default;
  void index(const std::string& name);  // byte ids, merge ranks; checks
  void encode_piece(std::string_view piece, std::vector<std::int32_t>& out) const;

  std::vector<std::string> tokens_;  // id -> raw bytes
  std::unordered_map<std::string, std::int32_t> ids_;
  std::vector<std::pair<std::int32_t, std::int32_t>> merges_;  // in rank order
  std::unordered_map<std::uint64_t, std::pair<std::int32_t, std::int32_t>> ranks_;  // pair -> (rank, merged id)
  std::vector<std::int32_t> byte_ids_ = std::vector<std::int32_t>(256, -1);
  std::vector<std::pair<std::string, std::int32_t>> specials_;  // longest first
};

// GPT-2's pre-tokenizer: `text` cut into the pattern's pieces, in order (they tile the text).
std::vector<std::string_view> gpt2_pieces(std::string_view text);
// GPT-2's byte-to-unicode alphabet: the UTF-8 spelling of byte b, and back.
const std::string& byte_to_unicode(std::uint8_t b);
// The raw bytes of a token spelled in that alphabet; nullopt when a character is not in it.
std::optional<std::string> unicode_to_bytes(std::string_view spelled);

}  // namespace loom::data
