// Autoregressive generation with a GPT: greedy (temperature 0) or sampled. The whole window is
// recomputed for every new token (no key/value cache): meant for samples and evaluations of small
// models, not for serving.
#pragma once

#include <cstdint>
#include <vector>

#include "loom/nn/gpt.hpp"

namespace loom::nn {

struct GenerateOptions {
  std::int64_t max_new_tokens = 32;
  float temperature = 0.0f;  // 0: argmax
  std::uint64_t seed = 1;    // for sampling
};

// Continues each prompt (all the same length, at least one token) by max_new_tokens tokens of
// the real vocabulary; the window slides when it exceeds the model's context. Returns only the
// new tokens, one row per prompt.
std::vector<std::vector<std::int32_t>> generate(GPT& model, const std::vector<std::vector<std::int32_t>>& prompts,
                                                const GenerateOptions& options = {});

}  // namespace loom::nn
