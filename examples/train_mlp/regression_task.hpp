// A regression stream for train_mlp: x ~ N(0, 1)^inputs, target = sin(x A) B / sqrt(k) with a fixed
// random "teacher" (A, B from the task seed), so a wide enough MLP can fit it and the held-out
// error says how well it did. Batch g of the job depends only on the seed and g; rank r of a job of
// N takes global batches r, r + N, ... (data::Partition), so checkpoints resume it exactly at any
// number of ranks.
#pragma once

#include <cstdint>
#include <vector>

#include "loom/data/batch_source.hpp"

namespace train_mlp {

struct RegressionTaskConfig {
  std::int64_t inputs = 16;
  std::int64_t outputs = 4;
  std::int64_t features = 32;  // k: the teacher's hidden width
  std::uint64_t seed = 1;
};

class RegressionTask final : public loom::data::BatchSource {
 public:
  RegressionTask(const RegressionTaskConfig& config, std::int64_t batch, loom::data::Partition partition = {});
  // tokens: x [batch, inputs] f32; targets [batch, outputs] f32.
  loom::data::Batch next() override;
  std::int64_t position() const override { return position_; }
  void seek(std::int64_t position) override;
  std::int64_t vocab_size() const override { return 0; }  // not a token stream
  // Global batch g (the held-out set uses batches no training rank reaches: g >= 2^40).
  loom::data::Batch global_batch(std::int64_t g) const;

 private:
  RegressionTaskConfig config_;
  std::int64_t batch_;
  loom::data::Partition partition_;
  std::int64_t position_ = 0;
  std::vector<float> a_, b_;  // the teacher: [inputs, features], [features, outputs]
};

}  // namespace train_mlp
