// The small GPT the training, checkpoint and data-parallel tests share: 2 layers, 2 heads, width 16,
// and the trainer options of the checkpoint tests.
#pragma once

#include <cstdint>

#include "loom/nn/gpt.hpp"
#include "loom/train/trainer.hpp"

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

// Trainer options for a few steps of it: AdamW, lr 3e-3 -> 3e-4 over 10 steps, ZeRO stage `zero`.
inline train::TrainerOptions tiny_trainer_options(int zero) {
  train::TrainerOptions o;
  o.zero = zero;
  o.schedule = {.max_lr = 3e-3f, .min_lr = 3e-4f, .warmup = 1, .total = 10};
  return o;
}

}  // namespace loom::test
