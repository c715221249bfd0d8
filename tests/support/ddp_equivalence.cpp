#include "support/ddp_equivalence.hpp"

#include <algorithm>
#include <cmath>
#include <exception>
#include <random>
#include <vector>

#include "loom/core/tensor_ops.hpp"
#include "loom/data/batch_source.hpp"
#include "loom/ddp/gradient_reducer.hpp"
#include "loom/nn/gpt.hpp"
#include "loom/train/trainer.hpp"
#include "support/tiny_gpt.hpp"

namespace loom::test {

namespace {
constexpr std::int64_t vocab = 32, steps_per_row = 8;
}  // namespace

data::Batch GlobalBatchSlice::next() {
  std::mt19937 rng(static_cast<std::uint32_t>(1000 + position_++));
  std::uniform_int_distribution<std::int32_t> token(0, static_cast<std::int32_t>(vocab - 1));
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(total_ * steps_per_row));
  std::vector<std::int32_t> targets(tokens.size());
  for (auto& t : tokens) t = token(rng);
  for (auto& t : targets) t = token(rng);
  const auto first = static_cast<std::ptrdiff_t>(begin_ * steps_per_row);
  const auto last = static_cast<std::ptrdiff_t>((begin_ + rows_) * steps_per_row);
  return {Tensor::from_vector(std::vector<std::int32_t>(tokens.begin() + first, tokens.begin() + last),
                              {rows_, steps_per_row}),
          Tensor::from_vector(std::vector<std::int32_t>(targets.begin() + first, targets.begin() + last),
                              {rows_, steps_per_row})};
}

data::Batch BadBatchAt::next() {
  const bool bad = slice_.position() == bad_;
  data::Batch batch = slice_.next();
  if (bad) batch.inputs.data<std::int32_t>()[1] = 99;
  return batch;
}

namespace {

train::TrainerOptions trainer_options(const EquivalenceCase& c) {
  train::TrainerOptions options;
  options.grad_accumulation = c.accumulation;
  options.max_grad_norm = c.max_grad_norm;  // clipping sees the averaged gradients: the same on every rank
  // SGD with momentum: the weights are linear in the gradients, so the comparison measures the
  // reduction itself. (AdamW divides by sqrt(v): a gradient that cancels to ~0 across the batch
  // turns summation-order noise into a full +-lr step in either direction.)
  options.optimizer = c.adamw ? train::TrainerOptions::OptimizerKind::adamw : train::TrainerOptions::OptimizerKind::sgd;
  options.schedule = c.adamw ? optim::CosineSchedule{.max_lr = 1e-2f, .min_lr = 1e-3f, .warmup = 1, .total = c.steps}
                             : optim::CosineSchedule{.max_lr = 0.5f, .min_lr = 0.05f, .warmup = 1, .total = c.steps};
  return options;
}

std::vector<double> weights(const nn::GPT& model) {
  std::vector<double> all;
  for (const nn::Parameter* p : model.parameters()) {
    const auto values = to_doubles(p->value().to(Device::cpu()));
    all.insert(all.end(), values.begin(), values.end());
  }
  return all;
}

}  // namespace

EquivalenceResult run_ddp_equivalence(comm::Communicator& comm, const EquivalenceCase& c) {
  EquivalenceResult result;
  try {
    const std::int64_t world = comm.size(), b = c.batch_per_rank;
    // The reference: one process, batch N x B, seed 7.
    nn::GPT reference(tiny_gpt(vocab, steps_per_row), nn::Precision::parse(c.precision), Device::cpu(), 7);
    const std::vector<double> initial = weights(reference);
    GlobalBatchSlice everything(world * b, 0, world * b);
    train::Trainer single(reference, everything, trainer_options(c));
    std::vector<train::StepResult> expected;
    for (int s = 0; s < c.steps; ++s) expected.push_back(single.step());
    // Data-parallel, the model built in its stage's layout: each rank initialises differently, and
    // the reducer gives every rank rank 0's weights; under ZeRO-3 each rank makes only its slices,
    // from the seed every rank must share.
    const std::uint64_t seed = c.zero == 3 ? 7 : 7 + static_cast<std::uint64_t>(comm.rank()) * 100;
    nn::GPT model(tiny_gpt(vocab, steps_per_row), nn::Precision::parse(c.precision), comm.device(), seed,
                  shard::space_layout(c.zero, &comm));
    train::TrainerOptions options = trainer_options(c);
    options.zero = c.zero;
    options.zero_options.keep_gathered_for_backward = c.keep_gathered_for_backward;
    options.zero_options.keep_gathered_across_micro_batches = c.keep_gathered_across_micro_batches;
    options.zero_options.reduction = c.zero_reduction;
    options.reducer.bucket_bytes = c.bucket_bytes;
    options.reducer.first_bucket_bytes = c.first_bucket_bytes;
    if (c.reduction != DType::f32) options.reducer.hook = ddp::compression_hook(c.reduction);
    GlobalBatchSlice mine(world * b, comm.rank() * b, b);
    train::Trainer parallel(model, mine, options, &comm);
    std::vector<float> losses;
    for (std::size_t s = 0; s < expected.size(); ++s) {
      if (c.zero == 3 && s + 1 == expected.size()) parallel.zero_engine()->reset_gather_report();
      const train::StepResult step = parallel.step();
      losses.push_back(step.loss);
      if (step.grad_norm > c.max_grad_norm) ++result.clipped_steps;
      // The norm before clipping: a sum instead of a mean, or a double division, shows here even
      // where clipping would hide it in the weights.
      result.max_norm_rel_diff = std::max(
          result.max_norm_rel_diff, std::fabs(static_cast<double>(step.grad_norm) / expected[s].grad_norm - 1.0));
      if (s == 0) {
        result.first_loss_diff = std::fabs(static_cast<double>(step.loss) - expected[s].loss);
        result.tokens_per_step = step.tokens;
      }
    }
    result.buckets = parallel.gradient_sync().stats().buckets;
    if (c.zero == 3) {
      const shard::GatherReport report = parallel.zero_engine()->gather_report();
      result.gathers = report.gathers;
      result.prefetched = report.prefetched;
      result.peak_gathered = report.peak_live;
      parallel.zero_engine()->unshard_values();  // every value, to compare
    }
    const std::vector<double> got = weights(model), want = weights(reference);
    for (std::size_t i = 0; i < want.size(); ++i) {
      result.max_weight_diff = std::max(result.max_weight_diff, std::fabs(static_cast<double>(got[i]) - want[i]));
      result.max_update = std::max(result.max_update, std::fabs(static_cast<double>(want[i]) - initial[i]));
    }
    if (c.zero > 0) {  // the same job with DDP
      nn::GPT ddp_model(tiny_gpt(vocab, steps_per_row), nn::Precision::parse(c.precision), comm.device(), 7);
      train::TrainerOptions ddp_options = options;
      ddp_options.zero = 0;
      ddp_options.zero_options = {};
      GlobalBatchSlice same(world * b, comm.rank() * b, b);
      train::Trainer ddp(ddp_model, same, ddp_options, &comm);
      for (int s = 0; s < c.steps; ++s) {
        const float loss = ddp.step().loss;
        result.max_ddp_loss_diff = std::max(result.max_ddp_loss_diff, std::fabs(static_cast<double>(loss) - losses[static_cast<std::size_t>(s)]));
      }
      const std::vector<double> ddp_weights = weights(ddp_model);
      for (std::size_t i = 0; i < got.size(); ++i) {
        result.max_ddp_weight_diff =
            std::max(result.max_ddp_weight_diff, std::fabs(static_cast<double>(got[i]) - ddp_weights[i]));
      }
    }
  } catch (const std::exception& e) {
    result.error = e.what();
  }
  return result;
}

}  // namespace loom::test
