#include "loom/nn/generate.hpp"

#include <algorithm>
#include <cmath>
#include <random>

#include "loom/core/error.hpp"
#include "loom/kernels/cast.hpp"

namespace loom::nn {

std::vector<std::vector<std::int32_t>> generate(GPT& model, const std::vector<std::vector<std::int32_t>>& prompts,
                                                const GenerateOptions& options) {
  require(!prompts.empty() && !prompts.front().empty(), "generate: needs at least one non-empty prompt");
  require(options.max_new_tokens >= 0 && options.temperature >= 0, "generate: max_new_tokens and temperature must be "
          ">= 0, got ", options.max_new_tokens, " and ", options.temperature);
  const std::size_t length = prompts.front().size();
  for (const auto& p : prompts) require(p.size() == length, "generate: prompts must share one length");
  const std::int64_t batch = static_cast<std::int64_t>(prompts.size());
  const std::int64_t vocab = model.config().vocab_size, padded = model.config().padded_vocab();
  std::vector<std::vector<std::int32_t>> sequences = prompts, generated(prompts.size());
  std::mt19937_64 rng(options.seed);
  for (std::int64_t n = 0; n < options.max_new_tokens; ++n) {
    const std::int64_t total = static_cast<std::int64_t>(sequences.front().size());
    const std::int64_t steps = std::min(total, model.config().context);
    Tensor tokens = Tensor::empty({batch, steps}, DType::i32);
    for (std::int64_t b = 0; b < batch; ++b) {
      std::copy(sequences[b].end() - steps, sequences[b].end(), tokens.data<std::int32_t>() + b * steps);
    }
    model.forward(tokens);
    // The last position's logits of every row, as f32 on the host.
    const Tensor last = Tensor::empty({batch, padded}, DType::f32, model.device());
    for (std::int64_t b = 0; b < batch; ++b) {
      kernels::cast(model.logits().select(b).select(steps - 1), last.select(b));
    }
    const std::vector<float> logits = last.to_vector<float>();
    for (std::int64_t b = 0; b < batch; ++b) {
      const float* row = logits.data() + b * padded;
      std::int32_t next = 0;
      if (options.temperature == 0.0f) {
        next = static_cast<std::int32_t>(std::max_element(row, row + vocab) - row);
      } else {
        const float top = *std::max_element(row, row + vocab);
        std::vector<double> weights(static_cast<std::size_t>(vocab));
        for (std::int64_t v = 0; v < vocab; ++v) weights[v] = std::exp((row[v] - top) / options.temperature);
        std::discrete_distribution<std::int32_t> pick(weights.begin(), weights.end());
        next = pick(rng);
      }
      sequences[b].push_back(next);
      generated[b].push_back(next);
    }
  }
  return generated;
}

}  // namespace loom::nn
