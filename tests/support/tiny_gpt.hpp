// The small GPT the training, checkpoint and data-parallel tests share: 2 layers, 2 heads, width 16.
#pragma once

#include <cstdint>

#include "loom/nn/gpt.hpp"

namespace loom::test {

inline nn::GPTConfig tiny_gpt(std::int64_t vocab_size, std::int64_t context) {
  nn::GPTConfig c;
  c.vocab_size = vocab_size;
  c.context = context;
  c.layers = 2;
  c.heads = 2;
  c.channels = 16;
  return c;
}

}  // namespace loom::test
