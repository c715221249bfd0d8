#include "loom/data/token_batches.hpp"

#include <fstream>
#include <iterator>
#include <utility>

#include "loom/core/error.hpp"
#include "loom/data/token_shard.hpp"
#include "loom/data/tokenizer.hpp"

namespace loom::data {

TokenBatches::TokenBatches(std::vector<std::int32_t> tokens, std::int64_t vocab_size, std::int64_t batch,
                           std::int64_t steps, Partition partition)
    : tokens_(std::move(tokens)), vocab_size_(vocab_size), batch_(batch), steps_(steps), partition_(partition) {
  partition.validate();
  require(batch >= 1 && steps >= 1, "token batches: batch and sequence length must be positive, got ", batch, " and ",
          steps);
  const std::int64_t n = static_cast<std::int64_t>(tokens_.size());
  require(n >= steps + 1, "token batches: the data has ", n, " tokens, fewer than sequence length + 1 = ", steps + 1);
  for (std::size_t i = 0; i < tokens_.size(); ++i) {
    require(tokens_[i] >= 0 && tokens_[i] < vocab_size, "token batches: token ", tokens_[i], " at position ", i,
            " is outside the vocabulary [0, ", vocab_size, ")", vocab_size == 256 ? " (GPT-2 token shards need a "
            "vocabulary of 50257: --vocab 50257)" : "");
  }
  windows_ = (n - 1) / steps;
}

void TokenBatches::seek(std::int64_t position) {
  require(position >= 0, "token batches: position must be >= 0, got ", position);
  position_ = position;
}

Batch TokenBatches::next() {
  Batch out{Tensor::empty({batch_, steps_}, DType::i32), Tensor::empty({batch_, steps_}, DType::i32)};
  const std::int64_t global = position_ * partition_.world + partition_.rank;
  for (std::int64_t b = 0; b < batch_; ++b) {
    const std::int64_t start = ((global * batch_ + b) % windows_) * steps_;
    std::int32_t* tokens = out.inputs.data<std::int32_t>() + b * steps_;
    std::int32_t* targets = out.targets.data<std::int32_t>() + b * steps_;
    for (std::int64_t t = 0; t < steps_; ++t) {
      tokens[t] = tokens_[static_cast<std::size_t>(start + t)];
      targets[t] = tokens_[static_cast<std::size_t>(start + t + 1)];
    }
  }
  ++position_;
  return out;
}

std::vector<std::int32_t> read_text_tokens(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorCategory::io, "cannot open text file '", path, "'");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) fail(ErrorCategory::io, "cannot read text file '", path, "'");
  return ByteTokenizer().encode(text);
}

std::vector<std::int32_t> read_shard_tokens(const std::vector<std::string>& paths) {
  require(!paths.empty(), "no token shards given");
  std::vector<std::int32_t> tokens;
  for (const std::string& path : paths) {
    const std::vector<std::uint16_t> shard = read_token_shard(path);
    tokens.insert(tokens.end(), shard.begin(), shard.end());
  }
  return tokens;
}

}  // namespace loom::data
