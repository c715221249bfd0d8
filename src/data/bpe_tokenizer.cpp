#include "loom/data/bpe_tokenizer.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <queue>

#include <nlohmann/json.hpp>

#include "loom/core/error.hpp"
#include "loom/io/files.hpp"

namespace loom::data {

namespace {

// Special tokens must be texts of their own: an empty one would match everywhere.
void check_specials(const std::vector<std::string>& specials, const std::string& name) {
  for (std::size_t i = 0; i < specials.size(); ++i) {
    require(!specials[i].empty(), "'", name, "': a special token is empty");
    for (std::size_t j = 0; j < i; ++j) {
      require(specials[i] != specials[j], "'", name, "': the special token '", specials[i], "' is named twice");
    }
  }
}

std::uint64_t pair_key(std::int32_t a, std::int32_t b) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
}

std::string spelled(std::string_view bytes) {
  std::string out;
  for (const char c : bytes) out += byte_to_unicode(static_cast<std::uint8_t>(c));
  return out;
}

nlohmann::json parse_json(std::string_view text, const std::string& name) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorCategory::corrupt_data, "'", name, "' is not valid JSON: ", e.what());
  }
}

// A vocabulary object {"token": id, ...}: raw bytes by id (ids dense from 0), specials aside.
void read_vocab(const nlohmann::json& vocab, const std::string& name, const std::vector<std::string>& specials,
                std::vector<std::string>& tokens, std::vector<std::pair<std::string, std::int32_t>>& special_ids) {
  require(vocab.is_object() && !vocab.empty(), ErrorCategory::corrupt_data, "'", name,
          "': the vocabulary is not a non-empty object of token: id");
  tokens.assign(vocab.size(), std::string());
  std::vector<bool> seen(vocab.size(), false);
  for (const auto& [token, id_value] : vocab.items()) {
    require(id_value.is_number_integer(), ErrorCategory::corrupt_data, "'", name, "': token '", token,
            "' has a non-integer id");
    const auto id = id_value.get<std::int64_t>();
    require(id >= 0 && id < static_cast<std::int64_t>(vocab.size()) && !seen[static_cast<std::size_t>(id)],
            ErrorCategory::corrupt_data, "'", name, "': token '", token, "' has id ", id, ", but the ",
            vocab.size(), " ids must be 0..", vocab.size() - 1, " each once");
    seen[static_cast<std::size_t>(id)] = true;
    if (std::find(specials.begin(), specials.end(), token) != specials.end()) {
      tokens[static_cast<std::size_t>(id)] = token;  // as written: a special token is text, not bytes
      special_ids.emplace_back(token, static_cast<std::int32_t>(id));
      continue;
    }
    std::optional<std::string> bytes = unicode_to_bytes(token);
    require(bytes.has_value() && !bytes->empty(), ErrorCategory::corrupt_data, "'", name, "': token '", token,
            "' (id ", id, ") is not spelled in GPT-2's byte-level alphabet");
    tokens[static_cast<std::size_t>(id)] = std::move(*bytes);
  }
}

// One merge's two tokens, from "a b" or ["a", "b"].
std::pair<std::string, std::string> merge_parts(const nlohmann::json& merge, const std::string& where) {
  if (merge.is_string()) {
    const std::string line = merge.get<std::string>();
    const std::size_t space = line.find(' ');
    require(space != std::string::npos && space > 0 && space + 1 < line.size() &&
                line.find(' ', space + 1) == std::string::npos,
            ErrorCategory::corrupt_data, where, ": '", line, "' is not two tokens separated by one space");
    return {line.substr(0, space), line.substr(space + 1)};
  }
  require(merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string(),
          ErrorCategory::corrupt_data, where, ": a merge is neither \"a b\" nor [\"a\", \"b\"]");
  return {merge[0].get<std::string>(), merge[1].get<std::string>()};
}

}  // namespace

BpeTokenizer BpeTokenizer::from_vocab_merges(std::string_view vocab_json, std::string_view merges_txt,
                                             const std::string& name, const std::vector<std::string>& specials) {
  BpeTokenizer t;
  check_specials(specials, name);
  read_vocab(parse_json(vocab_json, name + " (vocab.json)"), name + " (vocab.json)", specials, t.tokens_, t.specials_);
  nlohmann::json merges = nlohmann::json::array();
  std::size_t line_number = 0, from = 0;
  while (from < merges_txt.size()) {
    std::size_t end = merges_txt.find('\n', from);
    if (end == std::string_view::npos) end = merges_txt.size();
    std::string_view line = merges_txt.substr(from, end - from);
    from = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_number == 1 && line.starts_with("#version"))) continue;
    merges.push_back(std::string(line));
  }
  t.index(name);  // the bytes first: merges are resolved against the vocabulary's spellings
  // Special tokens are whole texts, never the parts or result of a merge.
  std::unordered_map<std::string, std::int32_t> by_spelling;
  for (std::size_t id = 0; id < t.tokens_.size(); ++id) {
    const bool special = std::any_of(t.specials_.begin(), t.specials_.end(),
                                     [&](const auto& s) { return s.second == static_cast<std::int32_t>(id); });
    if (!special) by_spelling.emplace(spelled(t.tokens_[id]), static_cast<std::int32_t>(id));
  }
  for (const auto& merge : merges) {
    const std::string where = "'" + name + "' (merges.txt) merge " + std::to_string(t.merges_.size() + 1);
    const auto [a, b] = merge_parts(merge, where);
    const auto ia = by_spelling.find(a), ib = by_spelling.find(b), ic = by_spelling.find(a + b);
    require(ia != by_spelling.end() && ib != by_spelling.end(), ErrorCategory::corrupt_data, where, " '", a, " ", b,
            "' references the unknown token '", ia == by_spelling.end() ? a : b, "'");
    require(ic != by_spelling.end(), ErrorCategory::corrupt_data, where, " '", a, " ", b, "' makes '", a + b,
            "', which is not in the vocabulary");
    t.merges_.emplace_back(ia->second, ib->second);
  }
  t.index(name);
  return t;
}

namespace {

BpeTokenizer tokenizer_from_json(const nlohmann::json& root, const std::string& name) {
  require(root.is_object() && root.contains("model") && root["model"].is_object(), ErrorCategory::corrupt_data, "'",
          name, "' has no \"model\" object (not a Hugging Face tokenizer.json)");
  const nlohmann::json& model = root["model"];
  const std::string type = model.value("type", std::string("BPE"));
  require(type == "BPE", ErrorCategory::invalid_argument, "'", name, "' holds a ", type,
          " model; loom reads byte-level BPE (GPT-2's kind) only");
  require(!model.value("ignore_merges", false) && !model.value("byte_fallback", false),
          ErrorCategory::invalid_argument, "'", name, "': ignore_merges and byte_fallback are not GPT-2's byte-level "
          "BPE; loom does not read them");
  // GPT-2's pre-tokenizer exactly: ByteLevel with its own pattern (use_regex), no prefix space, no
  // normalizer. Others (a Split with another pattern before ByteLevel, as Llama 3's and Qwen's
  // files have) would load and then give other ids than Hugging Face's: they are refused.
  const nlohmann::json& pre = root.contains("pre_tokenizer") ? root["pre_tokenizer"] : nlohmann::json();
  const std::string pre_type = pre.is_object() ? pre.value("type", std::string()) : std::string("none");
  require(pre_type == "ByteLevel" && pre.value("use_regex", true), ErrorCategory::invalid_argument, "'", name,
          "' pre-tokenizes with ", pre_type == "ByteLevel" ? "ByteLevel without GPT-2's pattern (use_regex false)"
                                                           : pre_type,
          "; loom reads GPT-2's byte-level BPE only (a ByteLevel pre-tokenizer with its pattern)");
  require(!pre.value("add_prefix_space", false), ErrorCategory::invalid_argument, "'", name,
          "' adds a prefix space (add_prefix_space); GPT-2 does not, nor does loom");
  require(!root.contains("normalizer") || root["normalizer"].is_null(), ErrorCategory::invalid_argument, "'", name,
          "' normalizes text before tokenizing; GPT-2 does not, nor does loom");
  std::vector<std::string> specials;
  if (root.contains("added_tokens") && root["added_tokens"].is_array()) {
    for (const auto& added : root["added_tokens"]) {
      const std::string content = added.value("content", std::string());
      if (added.value("special", false) && !content.empty() &&
          std::find(specials.begin(), specials.end(), content) == specials.end()) {
        specials.push_back(content);
      }
    }
  }
  require(model.contains("vocab") && model.contains("merges") && model["merges"].is_array(),
          ErrorCategory::corrupt_data, "'", name, "': the model has no vocab or no merges list");
  nlohmann::json vocab = model["vocab"];
  // Added tokens outside the model's vocabulary (special ones) take their own ids.
  if (root.contains("added_tokens") && root["added_tokens"].is_array()) {
    for (const auto& added : root["added_tokens"]) {
      const std::string content = added.value("content", std::string());
      if (added.value("special", false) && !content.empty() && !vocab.contains(content)) {
        vocab[content] = added.value("id", -1);
      }
    }
  }
  std::string merges_txt;
  for (const auto& merge : model["merges"]) {
    const auto [a, b] = merge_parts(merge, "'" + name + "' merges");
    merges_txt += a + " " + b + "\n";
  }
  return BpeTokenizer::from_vocab_merges(vocab.dump(), merges_txt, name, specials);
}

}  // namespace

BpeTokenizer BpeTokenizer::from_tokenizer_json(std::string_view text, const std::string& name) {
  // Fields of the wrong type (a null "type", a numeric "content") surface as the JSON library's
  // type errors anywhere below: they are the file's fault.
  try {
    return tokenizer_from_json(parse_json(text, name), name);
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorCategory::corrupt_data, "'", name, "' has a field of the wrong type: ", e.what());
  }
}

BpeTokenizer BpeTokenizer::load(const std::string& path) {
  namespace fs = std::filesystem;
  if (fs::is_directory(path)) {
    const fs::path dir(path);
    if (fs::exists(dir / "tokenizer.json")) return load((dir / "tokenizer.json").string());
    require(fs::exists(dir / "vocab.json") && fs::exists(dir / "merges.txt"), ErrorCategory::io, "'", path,
            "' holds neither tokenizer.json nor vocab.json with merges.txt");
    return from_vocab_merges(io::read_file((dir / "vocab.json").string()), io::read_file((dir / "merges.txt").string()), path);
  }
  return from_tokenizer_json(io::read_file(path), path);
}

BpeTokenizer BpeTokenizer::from_merges(const std::vector<std::pair<std::string, std::string>>& merges,
                                       const std::vector<std::string>& specials) {
  BpeTokenizer t;
  check_specials(specials, "BPE merges");
  for (int b = 0; b < 256; ++b) t.tokens_.emplace_back(1, static_cast<char>(b));
  // GPT-2's order for the bytes: the printable ones first, as its alphabet numbers them.
  std::stable_sort(t.tokens_.begin(), t.tokens_.end(), [](const std::string& x, const std::string& y) {
    const auto code = [](const std::string& s) {
      const std::string& u = byte_to_unicode(static_cast<std::uint8_t>(s[0]));
      return u.size() == 1 ? static_cast<unsigned>(static_cast<unsigned char>(u[0]))
                           : ((static_cast<unsigned>(static_cast<unsigned char>(u[0])) & 0x1F) << 6) |
                                 (static_cast<unsigned>(static_cast<unsigned char>(u[1])) & 0x3F);
    };
    return code(x) < code(y);
  });
  std::unordered_map<std::string, std::int32_t> ids;
  for (std::size_t i = 0; i < t.tokens_.size(); ++i) ids.emplace(t.tokens_[i], static_cast<std::int32_t>(i));
  for (const auto& [a, b] : merges) {
    const auto ia = ids.find(a), ib = ids.find(b);
    require(ia != ids.end() && ib != ids.end(), "BPE merges: merge ", t.merges_.size() + 1,
            " joins a token not made before it");
    // A token spelled by two merges ("ab c", "a bc") has one id.
    if (const auto [at, fresh] = ids.try_emplace(a + b, static_cast<std::int32_t>(t.tokens_.size())); fresh) {
      t.tokens_.push_back(a + b);
    }
    t.merges_.emplace_back(ia->second, ib->second);
  }
  for (const std::string& special : specials) {
    t.specials_.emplace_back(special, static_cast<std::int32_t>(t.tokens_.size()));
    t.tokens_.push_back(special);
  }
  t.index("trained vocabulary");
  return t;
}

void BpeTokenizer::index(const std::string& name) {
  ids_.clear();
  std::vector<bool> special(tokens_.size(), false);
  for (const auto& [text, id] : specials_) special[static_cast<std::size_t>(id)] = true;
  for (std::size_t id = 0; id < tokens_.size(); ++id) {
    if (!special[id]) ids_.emplace(tokens_[id], static_cast<std::int32_t>(id));
  }
  for (int b = 0; b < 256; ++b) {
    const auto found = ids_.find(std::string(1, static_cast<char>(b)));
    require(found != ids_.end(), ErrorCategory::corrupt_data, "'", name, "': the vocabulary has no token for byte 0x",
            "0123456789abcdef"[b >> 4], "0123456789abcdef"[b & 15], " ('", byte_to_unicode(static_cast<std::uint8_t>(b)),
            "'); a byte-level BPE vocabulary holds all 256");
    byte_ids_[static_cast<std::size_t>(b)] = found->second;
  }
  ranks_.clear();
  for (std::size_t rank = 0; rank < merges_.size(); ++rank) {
    const auto [a, b] = merges_[rank];
    const auto merged = ids_.find(tokens_[static_cast<std::size_t>(a)] + tokens_[static_cast<std::size_t>(b)]);
    require(merged != ids_.end(), ErrorCategory::corrupt_data, "'", name, "': merge ", rank + 1,
            " makes a token that is not in the vocabulary (or only as a special token)");
    // A pair listed twice keeps its first (lowest) rank, as Hugging Face's loader does.
    ranks_.emplace(pair_key(a, b), std::make_pair(static_cast<std::int32_t>(rank), merged->second));
  }
  std::sort(specials_.begin(), specials_.end(),
            [](const auto& x, const auto& y) { return x.first.size() > y.first.size(); });
}

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<std::int32_t>& out) const {
  // The symbols as a linked list; candidate merges in a heap by (rank, position), checked when
  // popped against the symbols still there (a merge may have used either side since).
  struct Symbol {
    std::int32_t id;
    std::int32_t prev, next;
  };
  std::vector<Symbol> s(piece.size());
  for (std::size_t i = 0; i < piece.size(); ++i) {
    s[i] = {byte_ids_[static_cast<unsigned char>(piece[i])], static_cast<std::int32_t>(i) - 1,
            i + 1 < piece.size() ? static_cast<std::int32_t>(i + 1) : -1};
  }
  struct Candidate {
    std::int32_t rank, left, right, left_id, right_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  const auto consider = [&](std::int32_t left) {
    if (left < 0 || s[static_cast<std::size_t>(left)].next < 0) return;
    const std::int32_t right = s[static_cast<std::size_t>(left)].next;
    const std::int32_t a = s[static_cast<std::size_t>(left)].id, b = s[static_cast<std::size_t>(right)].id;
    if (const auto found = ranks_.find(pair_key(a, b)); found != ranks_.end()) {
      heap.push({found->second.first, left, right, a, b});
    }
  };
  for (std::size_t i = 0; i + 1 < piece.size(); ++i) consider(static_cast<std::int32_t>(i));
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Symbol& left = s[static_cast<std::size_t>(c.left)];
    if (left.id != c.left_id || left.next != c.right || s[static_cast<std::size_t>(c.right)].id != c.right_id) continue;
    Symbol& right = s[static_cast<std::size_t>(c.right)];
    left.id = ranks_.at(pair_key(c.left_id, c.right_id)).second;
    left.next = right.next;
    if (right.next >= 0) s[static_cast<std::size_t>(right.next)].prev = c.left;
    right.id = -1;  // gone
    consider(left.prev);
    consider(c.left);
  }
  for (std::int32_t i = piece.empty() ? -1 : 0; i >= 0; i = s[static_cast<std::size_t>(i)].next) out.push_back(s[static_cast<std::size_t>(i)].id);
}

std::vector<std::int32_t> BpeTokenizer::encode_ordinary(std::string_view text) const {
  std::vector<std::int32_t> out;
  out.reserve(text.size() / 3);
  // Words repeat: a piece met before in this text reuses its ids.
  std::unordered_map<std::string_view, std::pair<std::size_t, std::size_t>> seen;  // piece -> [from, to) in out
  for (const std::string_view piece : gpt2_pieces(text)) {
    if (const auto found = seen.find(piece); found != seen.end()) {
      const auto [from, to] = found->second;
      for (std::size_t i = from; i < to; ++i) out.push_back(out[i]);
      continue;
    }
    const std::size_t from = out.size();
    encode_piece(piece, out);
    seen.emplace(piece, std::make_pair(from, out.size()));
  }
  return out;
}

std::vector<std::int32_t> BpeTokenizer::encode(std::string_view text) const {
  if (specials_.empty()) return encode_ordinary(text);
  std::vector<std::int32_t> out;
  std::size_t from = 0;
  while (from <= text.size()) {
    // The next special token (the longest of those starting at the earliest position).
    std::size_t at = std::string_view::npos;
    const std::pair<std::string, std::int32_t>* which = nullptr;
    for (const auto& special : specials_) {
      const std::size_t found = text.find(special.first, from);
      if (found < at) at = found, which = &special;
    }
    const std::vector<std::int32_t> ordinary = encode_ordinary(text.substr(from, at == std::string_view::npos ? text.size() - from : at - from));
    out.insert(out.end(), ordinary.begin(), ordinary.end());
    if (which == nullptr) break;
    out.push_back(which->second);
    from = at + which->first.size();
  }
  return out;
}

std::vector<std::string> BpeTokenizer::special_tokens() const {
  std::vector<std::string> specials;
  for (const auto& special : specials_) specials.push_back(special.first);
  return specials;
}

std::size_t gpt2_cut_point(std::string_view text, std::size_t at_most, std::span<const std::string> specials) {
  const auto white = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; };
  const auto printable = [](char c) { return c > ' ' && c < 0x7f; };
  for (std::size_t n = std::min(at_most, text.size()); n >= 1; --n) {
    if (n == text.size() || !white(text[n]) || !printable(text[n - 1])) continue;
    // A special token that holds white space could straddle the cut.
    const bool inside = std::any_of(specials.begin(), specials.end(), [&](const std::string& special) {
      const std::size_t length = special.size();
      if (length == 0) return false;
      const std::size_t from = n >= length ? n - length + 1 : 0;
      const std::size_t found = text.substr(from, std::min(text.size() - from, 2 * length - 1)).find(special);
      return found != std::string_view::npos && from + found < n;
    });
    if (!inside) return n;
  }
  return 0;
}

std::string BpeTokenizer::decode(std::span<const std::int32_t> ids) const {
  std::string text;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    require(ids[i] >= 0 && ids[i] < vocab_size(), "BPE decode: id ", ids[i], " at position ", i,
            " is outside the vocabulary [0, ", vocab_size(), ")");
    text += tokens_[static_cast<std::size_t>(ids[i])];
  }
  return text;
}

std::optional<std::int32_t> BpeTokenizer::id_of(std::string_view token_bytes) const {
  const auto found = ids_.find(std::string(token_bytes));
  return found == ids_.end() ? std::nullopt : std::optional<std::int32_t>(found->second);
}

std::optional<std::int32_t> BpeTokenizer::special_id(std::string_view special) const {
  for (const auto& [text, id] : specials_) {
    if (text == special) return id;
  }
  return std::nullopt;
}

std::string BpeTokenizer::vocab_json() const {
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  std::vector<bool> special(tokens_.size(), false);
  for (const auto& [text, id] : specials_) special[static_cast<std::size_t>(id)] = true;
  for (std::size_t id = 0; id < tokens_.size(); ++id) {
    vocab[special[id] ? tokens_[id] : spelled(tokens_[id])] = id;
  }
  return vocab.dump();
}

std::string BpeTokenizer::merges_txt() const {
  std::string out = "#version: 0.2\n";
  for (const auto& [a, b] : merges_) {
    out += spelled(tokens_[static_cast<std::size_t>(a)]) + " " + spelled(tokens_[static_cast<std::size_t>(b)]) + "\n";
  }
  return out;
}

std::string BpeTokenizer::tokenizer_json() const {
  using json = nlohmann::ordered_json;
  json added = json::array();
  std::vector<std::pair<std::string, std::int32_t>> specials = specials_;
  std::sort(specials.begin(), specials.end(), [](const auto& x, const auto& y) { return x.second < y.second; });
  for (const auto& [text, id] : specials) {
    added.push_back({{"id", id}, {"content", text}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                     {"normalized", true}, {"special", true}});
  }
  const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
                           {"use_regex", true}};
  json merges = json::array();
  for (const auto& [a, b] : merges_) {
    merges.push_back(spelled(tokens_[static_cast<std::size_t>(a)]) + " " + spelled(tokens_[static_cast<std::size_t>(b)]));
  }
  json model = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false},
                {"ignore_merges", false}, {"vocab", json::parse(vocab_json())}, {"merges", merges}};
  const json root = {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}, {"added_tokens", added},
                     {"normalizer", nullptr}, {"pre_tokenizer", byte_level}, {"post_processor", byte_level},
                     {"decoder", byte_level}, {"model", model}};
  return root.dump();
}

void BpeTokenizer::save(const std::string& dir) const {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) fail(ErrorCategory::io, "cannot create '", dir, "': ", error.message());
  const auto write = [&](const std::string& file, const std::string& text) {
    const std::string path = (std::filesystem::path(dir) / file).string();
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
    out.close();
    if (!out) fail(ErrorCategory::io, "cannot write '", path, "'");
  };
  write("vocab.json", vocab_json());
  write("merges.txt", merges_txt());
  write("tokenizer.json", tokenizer_json());
}

}  // namespace loom::data
