// Trainer with tensor parallelism composed with data parallelism: a regression MLP of
// nn::ColumnParallelLinear then nn::RowParallelLinear, trained on a data x tensor mesh of
// in-process ranks (topo::DeviceMesh), against the same MLP of nn::Linear in one process on the
// same global batches. Clipping is tight (max norm 0.05), so every step's update depends on the
// global norm being the whole gradient's (the split weights' squares summed over the tensor
// group, the replicated output bias counted once). Checked at TP 2, TP 2 x DP 2 under DDP and
// ZeRO-1, and TP 4: the losses of every step, and every rank's blocks of the weights after 4 steps.
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "loom/comm/in_process.hpp"
#include "loom/data/batch_source.hpp"
#include "loom/model/model.hpp"
#include "loom/nn/linear.hpp"
#include "loom/nn/loss.hpp"
#include "loom/nn/tensor_parallel.hpp"
#include "loom/topo/mesh.hpp"
#include "loom/train/trainer.hpp"

using loom::Tensor;

namespace {

constexpr std::int64_t features = 4, hidden = 8, global_rows = 8;

// Rows [begin, begin + rows) of global batch p: x_j = sin(1.3 p + 0.7 i + 0.5 j), y = x_0 x_1 + x_2.
class RegressionSlice final : public loom::data::BatchSource {
 public:
  RegressionSlice(std::int64_t begin, std::int64_t rows) : begin_(begin), rows_(rows) {}
  loom::data::Batch next() override {
    Tensor x = Tensor::empty({rows_, features}, loom::DType::f32), y = Tensor::empty({rows_, 1}, loom::DType::f32);
    for (std::int64_t r = 0; r < rows_; ++r) {
      const double i = static_cast<double>(begin_ + r), p = static_cast<double>(position_);
      float* row = x.data<float>() + r * features;
      for (std::int64_t j = 0; j < features; ++j) row[j] = static_cast<float>(std::sin(1.3 * p + 0.7 * i + 0.5 * static_cast<double>(j)));
      y.data<float>()[r] = row[0] * row[1] + row[2];
    }
    ++position_;
    return {x, y};
  }
  std::int64_t position() const override { return position_; }
  void seek(std::int64_t position) override { position_ = position; }

 private:
  std::int64_t begin_, rows_, position_ = 0;
};

// The MLP, either of nn::Linear (tensor == nullptr) or tensor-parallel over `tensor`.
class Mlp final : public loom::model::Model {
 public:
  explicit Mlp(loom::comm::Communicator* tensor)
      : tensor_ranks_(tensor != nullptr ? tensor->size() : 1), tensor_rank_(tensor != nullptr ? tensor->rank() : 0) {
    std::vector<loom::model::UnitSpec> units{{"hidden", {}}, {"out", {}}};
    if (tensor == nullptr) {
      hidden_ = std::make_unique<loom::nn::Linear>("hidden", features, hidden, loom::nn::LinearOptions{.bias = true, .gelu = true},
                                                   precision_, loom::Device::cpu());
      out_ = std::make_unique<loom::nn::Linear>("out", hidden, 1, loom::nn::LinearOptions{.bias = true}, precision_,
                                                loom::Device::cpu());
      hidden_->weight().set_init(loom::model::Init::normal(0.5f));
      hidden_->collect_parameters(units[0].parameters);
      out_->collect_parameters(units[1].parameters);
    } else {
      tp_hidden_ = std::make_unique<loom::nn::ColumnParallelLinear>("hidden", features, hidden,
                                                                    loom::nn::LinearOptions{.bias = true, .gelu = true},
                                                                    precision_, loom::Device::cpu(), tensor);
      tp_out_ = std::make_unique<loom::nn::RowParallelLinear>("out", hidden, 1, true, precision_, loom::Device::cpu(),
                                                              tensor);
      tp_hidden_->weight().set_init(loom::model::Init::normal(0.5f));
      tp_hidden_->collect_parameters(units[0].parameters);
      tp_out_->collect_parameters(units[1].parameters);
    }
    space_ = std::make_unique<loom::model::ParameterSpace>(std::move(units));
    space_->initialize(21);
  }

  float forward(const Tensor& x, const Tensor& y, loom::StreamRef stream = {}) override {
    before_forward(0, stream);
    const Tensor h = hidden_ ? hidden_->forward(x, stream) : tp_hidden_->forward(x, stream);
    after_forward(0, stream);
    before_forward(1, stream);
    const Tensor prediction = out_ ? out_->forward(h, stream) : tp_out_->forward(h, stream);
    after_forward(1, stream);
    return loss_.forward(prediction, y, stream);
  }
  void backward(float loss_scale, loom::StreamRef stream = {}) override {
    const Tensor dy = loss_.backward(loss_scale, stream);
    before_backward(1, stream);
    const Tensor dh = out_ ? out_->backward(dy, stream) : tp_out_->backward(dy, stream);
    after_backward(1, stream);
    before_backward(0, stream);
    if (hidden_) hidden_->backward(dh, stream);
    else tp_hidden_->backward(dh, stream);
    after_backward(0, stream);
  }
  loom::model::ParameterSpace& parameter_space() noexcept override { return *space_; }
  const loom::model::ParameterSpace& parameter_space() const noexcept override { return *space_; }
  loom::Device device() const noexcept override { return loom::Device::cpu(); }
  const loom::model::Precision& precision() const noexcept override { return precision_; }
  std::string architecture_name() const override { return "tp_mlp"; }
  int tensor_ranks() const noexcept override { return tensor_ranks_; }
  int tensor_rank() const noexcept override { return tensor_rank_; }
  std::vector<std::pair<std::string, std::int64_t>> architecture() const override { return {{"hidden", hidden}}; }

 private:
  loom::model::Precision precision_ = loom::model::Precision::fp32();
  std::unique_ptr<loom::nn::Linear> hidden_, out_;
  int tensor_ranks_, tensor_rank_;
  std::unique_ptr<loom::nn::ColumnParallelLinear> tp_hidden_;
  std::unique_ptr<loom::nn::RowParallelLinear> tp_out_;
  loom::nn::MseLoss loss_;
  std::unique_ptr<loom::model::ParameterSpace> space_;
};

loom::train::TrainerOptions options(int zero) {
  loom::train::TrainerOptions o;
  o.zero = zero;
  o.max_grad_norm = 0.05f;
  o.schedule = {.max_lr = 1e-2f, .min_lr = 1e-3f, .warmup = 0, .total = 4};
  return o;
}

struct Run {
  std::vector<float> losses;
  std::vector<std::vector<float>> weights;  // hidden.weight, hidden.bias, out.weight, out.bias
};

std::vector<std::vector<float>> weights_of(Mlp& model) {
  std::vector<std::vector<float>> out;
  for (const loom::model::Parameter* p : model.parameter_space().parameters()) out.push_back(p->value().to_vector<float>());
  return out;
}

// Element (r, c) of a parameter's global tensor, from the block a rank holds.
std::string compare_blocks(const Mlp& model, const std::vector<std::vector<float>>& reference, double tolerance) {
  std::string problem;
  const auto parameters = model.parameter_space().parameters();
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    const loom::model::Parameter& p = *parameters[i];
    const std::vector<float> mine = p.value().to_vector<float>();
    const loom::model::Partition& box = p.partition();
    const std::int64_t cols = p.shape().rank() == 2 ? p.shape()[1] : 1;
    const std::int64_t global_cols = box.global.rank() == 2 ? box.global[1] : 1;
    for (std::int64_t k = 0; k < p.numel(); ++k) {
      const std::int64_t r = k / cols + box.offset[0], c = k % cols + (box.offset.size() == 2 ? box.offset[1] : 0);
      const double want = reference[i][static_cast<std::size_t>(r * global_cols + c)];
      if (std::fabs(mine[static_cast<std::size_t>(k)] - want) > tolerance * (1.0 + std::fabs(want))) {
        problem += p.name() + " differs at " + std::to_string(k) + "; ";
        break;
      }
    }
  }
  return problem;
}

}  // namespace

TEST_CASE("tensor parallelism composed with DDP and ZeRO-1 trains as one process does", "[train][tensor_parallel]") {
  constexpr int steps = 4;
  Run reference;
  {
    Mlp model(nullptr);
    RegressionSlice data(0, global_rows);
    loom::train::Trainer trainer(model, data, options(0));
    for (int s = 0; s < steps; ++s) reference.losses.push_back(trainer.step().loss);
    reference.weights = weights_of(model);
  }
  struct Layout {
    int world, tensor, zero;
  };
  for (const Layout layout : {Layout{2, 2, 0}, Layout{4, 2, 0}, Layout{4, 2, 1}, Layout{4, 4, 0}}) {
    INFO("world " << layout.world << ", tensor " << layout.tensor << ", ZeRO-" << layout.zero);
    std::vector<std::string> problems(static_cast<std::size_t>(layout.world));
    loom::comm::run_in_process(layout.world, [&](loom::comm::Communicator& world) {
      const loom::topo::DeviceMesh mesh(world, {.tensor = layout.tensor});
      Mlp model(&mesh.tensor());
      const int data_ranks = mesh.shape().data, d = mesh.coords().data;
      RegressionSlice data(global_rows * d / data_ranks, global_rows / data_ranks);
      loom::train::Trainer trainer(model, data, options(layout.zero), {&world, &mesh.data(), &mesh.tensor()});
      std::string& problem = problems[static_cast<std::size_t>(world.rank())];
      for (int s = 0; s < steps; ++s) {
        const float loss = trainer.step().loss;
        const float want = reference.losses[static_cast<std::size_t>(s)];
        if (std::fabs(loss - want) > 1e-5 * (1.0 + std::fabs(want))) {
          problem += "loss of step " + std::to_string(s + 1) + ": " + std::to_string(loss) + " vs " + std::to_string(want) + "; ";
        }
      }
      problem += compare_blocks(model, reference.weights, 2e-6);
    });
    CHECK(problems == std::vector<std::string>(static_cast<std::size_t>(layout.world)));
  }
}
