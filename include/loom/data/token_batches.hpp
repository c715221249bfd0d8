// Language-modelling batches from one token stream: row b of global batch g is the window of
// T + 1 tokens starting at token ((g * B + b) mod windows) * T; targets are the tokens shifted
// by one. The stream wraps around (epochs) and never needs shuffling to be reproducible.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/data/batch_source.hpp"

namespace loom::data {

class TokenBatches : public BatchSource {
 public:
  // Every token must lie in [0, vocab_size); the stream needs at least T + 1 tokens.
  TokenBatches(std::vector<std::int32_t> tokens, std::int64_t vocab_size, std::int64_t batch, std::int64_t steps,
               Partition partition = {});

  Batch next() override;
  std::int64_t position() const override { return position_; }
  void seek(std::int64_t position) override;
  std::int64_t vocab_size() const override { return vocab_size_; }
  std::int64_t windows() const noexcept { return windows_; }

 private:
  std::vector<std::int32_t> tokens_;
  std::int64_t vocab_size_, batch_, steps_, windows_;
  Partition partition_;
  std::int64_t position_ = 0;
};

// A text file as byte tokens (vocabulary 256).
std::vector<std::int32_t> read_text_tokens(const std::string& path);
// llm.c token shards concatenated in the order given.
std::vector<std::int32_t> read_shard_tokens(const std::vector<std::string>& paths);

}  // namespace loom::data
