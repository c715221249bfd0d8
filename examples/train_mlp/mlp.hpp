// A regression MLP behind loom's model interface: x [B, inputs] f32 -> hidden layers (GELU fused
// into each GEMM's epilogue) -> y [B, outputs], trained on the mean squared error. It exists to
// prove that Trainer, checkpoints, DDP and ZeRO serve any model::Model, not only GPT: one unit per
// layer, nothing GPT-specific anywhere.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "loom/model/model.hpp"
#include "loom/nn/linear.hpp"
#include "loom/nn/loss.hpp"

namespace train_mlp {

struct MlpConfig {
  std::int64_t inputs = 16;
  std::int64_t hidden = 128;
  std::int64_t layers = 3;  // Linear layers: layers - 1 hidden ones with GELU, then the output
  std::int64_t outputs = 4;
  void validate() const;
};

class Mlp final : public loom::model::Model {
 public:
  // Weights N(0, 1/fan_in), biases 0, from the seed (loom's counter-based initialisation, so that a
  // rank of a ZeRO-3 job, built in shard::space_layout(3, comm), makes only its slices).
  Mlp(const MlpConfig& config, const loom::model::Precision& precision, loom::Device device, std::uint64_t seed,
      const loom::model::SpaceLayout& layout = {});

  // inputs [B, inputs] and targets [B, outputs], f32 (on any device). Returns the mean over every
  // element of (y - target)^2.
  float forward(const loom::Tensor& inputs, const loom::Tensor& targets, loom::StreamRef stream = {}) override;
  void backward(float loss_scale = 1.0f, loom::StreamRef stream = {}) override;
  // The last forward's predictions [B, outputs].
  const loom::Tensor& predictions() const noexcept { return output_; }

  loom::model::ParameterSpace& parameter_space() noexcept override { return *space_; }
  const loom::model::ParameterSpace& parameter_space() const noexcept override { return *space_; }
  loom::Device device() const noexcept override { return device_; }
  const loom::model::Precision& precision() const noexcept override { return precision_; }
  std::string architecture_name() const override { return "mlp"; }
  std::vector<std::pair<std::string, std::int64_t>> architecture() const override;

 private:
  MlpConfig config_;
  loom::model::Precision precision_;
  loom::Device device_;
  std::vector<std::unique_ptr<loom::nn::Linear>> layers_;
  std::unique_ptr<loom::model::ParameterSpace> space_;
  loom::nn::MseLoss loss_;
  loom::Tensor input_, output_;
  loom::Tensor staged_inputs_;  // kept between steps: a step after the first allocates nothing
};

}  // namespace train_mlp
