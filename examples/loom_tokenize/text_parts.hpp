// What loom-tokenize works through: its files as a sequence of parts of about `part_bytes` each,
// so that a file of any size is tokenized in bounded memory and, cut into parts, over every core.
// A text file is one document, cut where GPT-2's pre-tokenizer always ends a piece
// (data::gpt2_cut_point), so its parts encode to the ids of the whole; a JSONL file is cut
// between lines, each non-blank line one document (its `field`).
#pragma once

#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

namespace loom_tokenize {

struct TextPart {
  std::vector<std::string> documents;  // JSONL: whole documents; text: one part of one document
  bool continues = false;              // text: the rest of the previous part's document
  bool ends_file = false;              // the last part of its file
  std::int64_t bytes = 0;              // of the file, this part covers
};

class TextParts {
 public:
  // field: empty for text files; specials: where no cut may fall (the vocabulary's).
  TextParts(std::vector<std::string> files, std::string field, std::vector<std::string> specials,
            std::size_t part_bytes);
  // The next part in file order; none after the last. An io Error for a file it cannot read, a
  // corrupt_data Error naming the file and line of a JSONL line without the field.
  std::optional<TextPart> next();

 private:
  bool fill(std::size_t bytes);  // reads until buffer_ holds `bytes` or the file ends; true at its end
  TextPart jsonl_part(std::size_t end);

  std::vector<std::string> files_;
  std::string field_;
  std::vector<std::string> specials_;
  std::size_t part_bytes_;
  std::size_t file_ = 0;
  std::ifstream in_;
  bool open_ = false, first_part_ = true;
  std::string buffer_;
  std::int64_t line_ = 0;  // JSONL lines read from the current file
};

}  // namespace loom_tokenize
