#include "regression_task.hpp"

#include <cmath>
#include <random>

#include "loom/core/error.hpp"

namespace train_mlp {

RegressionTask::RegressionTask(const RegressionTaskConfig& config, std::int64_t batch, loom::data::Partition partition)
    : config_(config), batch_(batch), partition_(partition) {
  loom::require(config.inputs > 0 && config.outputs > 0 && config.features > 0 && batch > 0,
                "regression task: sizes must be positive");
  partition.validate();
  std::mt19937_64 rng(config.seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  a_.resize(static_cast<std::size_t>(config.inputs * config.features));
  b_.resize(static_cast<std::size_t>(config.features * config.outputs));
  for (float& v : a_) v = normal(rng) / std::sqrt(static_cast<float>(config.inputs));
  for (float& v : b_) v = normal(rng);
}

void RegressionTask::seek(std::int64_t position) {
  loom::require(position >= 0, "regression task: position must be >= 0, got ", position);
  position_ = position;
}

loom::data::Batch RegressionTask::next() { return global_batch(position_++ * partition_.world + partition_.rank); }

loom::data::Batch RegressionTask::global_batch(std::int64_t g) const {
  const std::int64_t n = config_.inputs, k = config_.features, m = config_.outputs;
  std::mt19937_64 rng(config_.seed * 7919u + static_cast<std::uint64_t>(g) + 1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  loom::Tensor x = loom::Tensor::empty({batch_, n}, loom::DType::f32);
  loom::Tensor y = loom::Tensor::zeros({batch_, m}, loom::DType::f32);
  std::vector<float> hidden(static_cast<std::size_t>(k));
  for (std::int64_t row = 0; row < batch_; ++row) {
    float* xs = x.data<float>() + row * n;
    for (std::int64_t i = 0; i < n; ++i) xs[i] = normal(rng);
    for (std::int64_t f = 0; f < k; ++f) {
      double sum = 0;
      for (std::int64_t i = 0; i < n; ++i) sum += static_cast<double>(xs[i]) * a_[static_cast<std::size_t>(i * k + f)];
      hidden[static_cast<std::size_t>(f)] = static_cast<float>(std::sin(sum));
    }
    float* ys = y.data<float>() + row * m;
    for (std::int64_t o = 0; o < m; ++o) {
      double sum = 0;
      for (std::int64_t f = 0; f < k; ++f) sum += static_cast<double>(hidden[static_cast<std::size_t>(f)]) * b_[static_cast<std::size_t>(f * m + o)];
      ys[o] = static_cast<float>(sum / std::sqrt(static_cast<double>(k)));
    }
  }
  return {x, y};
}

}  // namespace train_mlp
