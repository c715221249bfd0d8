#include "text_parts.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <string_view>

#include "loom/core/error.hpp"
#include "loom/data/bpe_tokenizer.hpp"

namespace loom_tokenize {

TextParts::TextParts(std::vector<std::string> files, std::string field, std::vector<std::string> specials,
                     std::size_t part_bytes)
    : files_(std::move(files)), field_(std::move(field)), specials_(std::move(specials)),
      part_bytes_(std::max<std::size_t>(part_bytes, 1)) {}

bool TextParts::fill(std::size_t bytes) {
  if (buffer_.size() < bytes) {
    const std::size_t had = buffer_.size();
    buffer_.resize(bytes);
    in_.read(buffer_.data() + had, static_cast<std::streamsize>(bytes - had));
    buffer_.resize(had + static_cast<std::size_t>(in_.gcount()));
    loom::require(!in_.bad(), loom::ErrorCategory::io, "cannot read '", files_[file_], "'");
  }
  return in_.eof() || in_.peek() == std::char_traits<char>::eof();
}

TextPart TextParts::jsonl_part(std::size_t end) {
  TextPart part;
  std::size_t from = 0;
  while (from < end) {
    std::size_t stop = buffer_.find('\n', from);
    if (stop == std::string::npos || stop > end) stop = end;
    ++line_;
    const std::string_view row(buffer_.data() + from, stop - from);
    from = stop + 1;
    if (row.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    nlohmann::json value;
    try {
      value = nlohmann::json::parse(row);
    } catch (const nlohmann::json::exception& e) {
      loom::fail(loom::ErrorCategory::corrupt_data, "'", files_[file_], "' line ", line_, " is not JSON: ", e.what());
    }
    loom::require(value.is_object() && value.contains(field_) && value[field_].is_string(),
                  loom::ErrorCategory::corrupt_data, "'", files_[file_], "' line ", line_, " has no string field \"",
                  field_, "\"");
    part.documents.push_back(value[field_].get<std::string>());
  }
  return part;
}

std::optional<TextPart> TextParts::next() {
  if (file_ >= files_.size()) return std::nullopt;
  if (!open_) {
    in_ = std::ifstream(files_[file_], std::ios::binary);
    loom::require(in_.good(), loom::ErrorCategory::io, "cannot open '", files_[file_], "'");
    open_ = true;
    first_part_ = true;
    line_ = 0;
    buffer_.clear();
  }
  // Read a part's worth, then cut it where allowed; with no place to cut (a line, or a run without
  // white space, longer than a part), read more.
  std::size_t want = part_bytes_, cut = 0;
  bool at_end = false;
  for (;;) {
    at_end = fill(want);
    if (at_end) {
      cut = buffer_.size();
      break;
    }
    if (field_.empty()) {
      cut = loom::data::gpt2_cut_point(buffer_, buffer_.size(), specials_);
    } else {
      const std::size_t newline = buffer_.rfind('\n');
      cut = newline == std::string::npos ? 0 : newline + 1;
    }
    if (cut > 0) break;
    want = buffer_.size() * 2;
  }
  TextPart part;
  if (field_.empty()) {
    part.documents.push_back(buffer_.substr(0, cut));
    part.continues = !first_part_;
  } else {
    part = jsonl_part(cut);
  }
  part.bytes = static_cast<std::int64_t>(cut);
  buffer_.erase(0, cut);
  first_part_ = false;
  if (at_end) {
    part.ends_file = true;
    in_.close();
    open_ = false;
    ++file_;
  }
  return part;
}

}  // namespace loom_tokenize
