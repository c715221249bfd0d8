// custom_model: the code of docs/guide.md, "train your own model with loom". A two-layer regression
// network, a dataset of examples that are not tokens, and Trainer: one process, or data-parallel
// under mpirun (DDP, ZeRO-1, -2 or -3), with checkpoints that resume at any number of ranks.
//   build/examples/custom_model/custom_model --steps 400
//   mpirun -np 2 build/examples/custom_model/custom_model --zero 2 --checkpoint-dir /tmp/run
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <memory>
#include <random>

#include "loom/loom.hpp"

// 1. The model: x [B, 4] -> Linear + GELU -> Linear -> y [B, 1], mean squared error.
class TwoLayerNet final : public loom::model::Model {
 public:
  TwoLayerNet(std::int64_t hidden, loom::Device device, std::uint64_t seed, const loom::model::SpaceLayout& layout)
      : device_(device),
        width_(hidden),
        hidden_("hidden", 4, hidden, {.bias = true, .gelu = true}, precision_, device),
        out_("out", hidden, 1, {.bias = true, .gelu = false}, precision_, device) {
    hidden_.weight().set_init(loom::model::Init::normal(0.5f));  // default: N(0, 0.02), GPT-2's rule
    std::vector<loom::model::UnitSpec> units{{"hidden", {}}, {"out", {}}};  // one unit per layer
    hidden_.collect_parameters(units[0].parameters);
    out_.collect_parameters(units[1].parameters);
    space_ = std::make_unique<loom::model::ParameterSpace>(std::move(units), layout);
    space_->initialize(seed);  // values from (seed, name, index): the same on any number of ranks
  }

  float forward(const loom::Tensor& x, const loom::Tensor& y, loom::StreamRef stream = {}) override {
    const loom::Tensor xs = x.to(device_, stream);
    before_forward(0, stream);  // the unit hooks: ZeRO binds, gathers and frees around them
    const loom::Tensor h = hidden_.forward(xs, stream);
    after_forward(0, stream);
    before_forward(1, stream);
    const loom::Tensor prediction = out_.forward(h, stream);
    after_forward(1, stream);
    return loss_.forward(prediction, y, stream);
  }
  void backward(float loss_scale, loom::StreamRef stream = {}) override {
    const loom::Tensor dy = loss_.backward(loss_scale, stream);  // loss_scale x d(loss)/dy
    before_backward(1, stream);
    const loom::Tensor dh = out_.backward(dy, stream);  // adds to the gradients, marks them ready
    after_backward(1, stream);
    before_backward(0, stream);
    hidden_.backward(dh, stream);
    after_backward(0, stream);
  }

  loom::model::ParameterSpace& parameter_space() noexcept override { return *space_; }
  const loom::model::ParameterSpace& parameter_space() const noexcept override { return *space_; }
  loom::Device device() const noexcept override { return device_; }
  const loom::model::Precision& precision() const noexcept override { return precision_; }
  std::string architecture_name() const override { return "two_layer_net"; }
  std::vector<std::pair<std::string, std::int64_t>> architecture() const override {
    return {{"hidden", width_}};  // a checkpoint of another width is refused by name
  }

 private:
  loom::model::Precision precision_ = loom::model::Precision::fp32();
  loom::Device device_;
  std::int64_t width_;
  loom::nn::Linear hidden_, out_;
  loom::nn::MseLoss loss_;
  std::unique_ptr<loom::model::ParameterSpace> space_;
};

// 2. The data: n examples x ~ U(-2, 2)^4 with y = sin(2 x0) cos(x1) + x2 x3 / 2, made once from a
// seed (a real program would read its files here). examples() copies out the rows asked for.
class Points final : public loom::data::Dataset {
 public:
  Points(std::int64_t n, std::uint64_t seed) : x_(static_cast<std::size_t>(4 * n)), y_(static_cast<std::size_t>(n)) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
    for (float& v : x_) v = uniform(rng);
    for (std::size_t i = 0; i < y_.size(); ++i) {
      const float* x = &x_[4 * i];
      y_[i] = std::sin(2 * x[0]) * std::cos(x[1]) + 0.5f * x[2] * x[3];
    }
  }
  std::int64_t size() const override { return static_cast<std::int64_t>(y_.size()); }
  loom::data::Batch examples(std::span<const std::int64_t> indices) const override {
    const auto rows = static_cast<std::int64_t>(indices.size());
    loom::data::Batch batch{loom::Tensor::empty({rows, 4}, loom::DType::f32),
                            loom::Tensor::empty({rows, 1}, loom::DType::f32)};
    for (std::int64_t r = 0; r < rows; ++r) {
      const auto i = static_cast<std::size_t>(indices[static_cast<std::size_t>(r)]);
      std::copy_n(&x_[4 * i], 4, batch.inputs.data<float>() + 4 * r);
      batch.targets.data<float>()[r] = y_[i];
    }
    return batch;
  }

 private:
  std::vector<float> x_, y_;
};

// 3. Training: every rank runs the same program; Trainer does the rest.
struct Settings {
  std::int64_t steps = 400, batch = 64, save_every = 0;
  int zero = 0;
  std::string checkpoint_dir;
};

int train(loom::World& world, const Settings& s) {
  loom::comm::Communicator* comm = world.size() > 1 ? &world.comm() : nullptr;  // null: one process
  TwoLayerNet model(64, world.device(), /*seed=*/1, loom::shard::space_layout(s.zero, comm));
  const Points train_set(8192, 2), held_out(1024, 3);
  loom::data::DatasetBatches data(train_set, s.batch, {world.rank(), world.size()}, {.shuffle = true, .seed = 4});
  loom::train::TrainerOptions options;
  options.schedule = {.max_lr = 1e-2f, .min_lr = 1e-3f, .warmup = 20, .total = s.steps};
  options.adamw.weight_decay = 0.0f;
  options.data_seed = 4;
  options.zero = s.zero;
  loom::train::Trainer trainer(model, data, options, comm);
  const bool leader = world.rank() == 0;
  if (leader) std::printf("training: %s\n", loom::train::describe(options).c_str());
  if (!s.checkpoint_dir.empty() && trainer.resume(s.checkpoint_dir) && leader) {
    std::printf("resumed at step %lld\n", static_cast<long long>(trainer.steps_done()));
  }
  while (trainer.steps_done() < s.steps) {
    const loom::train::StepResult r = trainer.step();
    if (leader && r.step % 50 == 0) std::printf("step %4lld | loss %.6f\n", static_cast<long long>(r.step), r.loss);
    const bool save = r.step == s.steps || (s.save_every > 0 && r.step % s.save_every == 0);
    if (save && !s.checkpoint_dir.empty()) trainer.save(s.checkpoint_dir);  // every rank calls it
  }
  if (comm != nullptr && s.zero < 3) loom::ddp::verify_same_values(*comm, model.parameter_space());  // Error if not
  std::vector<std::int64_t> all(static_cast<std::size_t>(held_out.size()));
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::int64_t>(i);
  const loom::data::Batch test = held_out.examples(all);
  const double mse = model.forward(test.inputs, test.targets);  // ZeRO-3 gathers: every rank runs it
  double mean = 0, variance = 0;  // of the targets: the error of predicting their mean
  for (const float y : test.targets.to_vector<float>()) mean += y / 1024.0;
  for (const float y : test.targets.to_vector<float>()) variance += (y - mean) * (y - mean) / 1024.0;
  if (leader) std::printf("held-out mse %.6f, unexplained %.1f%% of the variance\n", mse, 100 * mse / variance);
  return 0;
}

int main(int argc, char** argv) {
  CLI::App app("custom_model: the model of docs/guide.md");
  Settings s;
  app.add_option("--steps", s.steps, "optimizer steps in all (also when resuming)")->check(CLI::PositiveNumber);
  app.add_option("--batch", s.batch, "global batch: examples per step over all ranks")->check(CLI::PositiveNumber);
  app.add_option("--zero", s.zero, "ZeRO stage under mpirun: 0 (DDP), 1, 2 or 3")->check(CLI::Range(0, 3));
  app.add_option("--checkpoint-dir", s.checkpoint_dir, "resume from and save to this run directory");
  app.add_option("--save-every", s.save_every, "also save every N steps")->check(CLI::NonNegativeNumber);
  try {
    const std::unique_ptr<loom::World> world = loom::init(argc, argv);  // takes loom's own flags out
    CLI11_PARSE(app, argc, argv);
    return train(*world, s);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "custom_model: %s\n", error.what());
    return 1;
  }
}
