#include "loom/nn/generate.hpp"

#include <algorithm>
#include <cmath>
#include <random>

#include "loom/core/error.hpp"
#include "loom/kernels/cast.hpp"

namespace loom::nn {

namespace {

// The last position's logits of every row over the whole padded vocabulary, as f32 on the host:
// [batch][padded]. Under tensor parallelism each rank holds a block of the columns; they are
// gathered (only these rows), so every rank of the group picks the same tokens.
std::vector<float> last_logits(GPT& model, std::int64_t batch, std::int64_t steps) {
  const std::int64_t block = model.vocab_block().rows;
  const Tensor last = Tensor::empty({batch, block}, DType::f32, model.device());
  for (std::int64_t b = 0; b < batch; ++b) kernels::cast(model.logits().select(b).select(steps - 1), last.select(b));
  comm::Communicator* tensor = model.tensor_group();
  if (tensor == nullptr) return last.to_vector<float>();
  const int ranks = tensor->size();
  const Tensor all = Tensor::empty({ranks, batch, block}, DType::f32, model.device());
  tensor->all_gather(last, all).wait();
  const std::vector<float> blocks = all.to_vector<float>();  // [rank][batch][block]
  std::vector<float> rows(blocks.size());
  for (int r = 0; r < ranks; ++r) {
    for (std::int64_t b = 0; b < batch; ++b) {
      const auto from = blocks.begin() + (r * batch + b) * block;
      std::copy(from, from + block, rows.begin() + b * block * ranks + r * block);
    }
  }
  return rows;
}

}  // namespace

std::vector<std::vector<std::int32_t>> generate(GPT& model, const std::vector<std::vector<std::int32_t>>& prompts,
                                                const GenerateOptions& options) {
  require(!prompts.empty() && !prompts.front().empty(), "generate: needs at least one non-empty prompt");
  require(options.max_new_tokens >= 0 && options.temperature >= 0, "generate: max_new_tokens and temperature must be "
          ">= 0, got ", options.max_new_tokens, " and ", options.temperature);
  const std::size_t length = prompts.front().size();
  for (const auto& p : prompts) require(p.size() == length, "generate: prompts must share one length");
  const std::int64_t batch = static_cast<std::int64_t>(prompts.size());
  const std::int64_t vocab = model.config().vocab_size;
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
    const std::vector<float> logits = last_logits(model, batch, steps);
    for (std::int64_t b = 0; b < batch; ++b) {
      const float* row = logits.data() + b * model.config().padded_vocab();
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
