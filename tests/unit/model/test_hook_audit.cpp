// model::HookAudit and what a model that misuses its unit hooks gets from Trainer: the first step
// names the hook and the unit (one process, DDP), and under ZeRO-2 the layer whose gradients are
// missing names the hooks, instead of an undefined GEMM operand.
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

#include "loom/comm/in_process.hpp"
#include "loom/core/error.hpp"
#include "loom/model/hook_audit.hpp"
#include "loom/nn/linear.hpp"
#include "loom/train/trainer.hpp"
#include "support/ddp_equivalence.hpp"
#include "support/error_message.hpp"

using loom::Tensor;

namespace {

enum class Mistake { none, no_backward_hooks_for_unit_1, after_forward_twice };

// Two Linear layers (8 -> 4 -> 1), one unit each; the loss is the mean output over the batch.
class TwoLayers final : public loom::model::Model {
 public:
  TwoLayers(Mistake mistake, const loom::model::SpaceLayout& layout = {})
      : mistake_(mistake),
        l0_("l0", 8, 4, {.bias = true, .gelu = true}, loom::model::Precision::fp32(), loom::Device::cpu()),
        l1_("l1", 4, 1, {.bias = true}, loom::model::Precision::fp32(), loom::Device::cpu()) {
    std::vector<loom::model::UnitSpec> units{{"l0", {}}, {"l1", {}}};
    l0_.collect_parameters(units[0].parameters);
    l1_.collect_parameters(units[1].parameters);
    space_ = std::make_unique<loom::model::ParameterSpace>(std::move(units), layout);
    space_->initialize(3);
  }

  float forward(const Tensor& tokens, const Tensor&, loom::StreamRef stream) override {
    const std::vector<std::int32_t> t = tokens.to_vector<std::int32_t>();
    std::vector<float> x(t.begin(), t.end());
    input_ = Tensor::from_vector(x, {tokens.shape()[0], tokens.shape()[1]});
    before_forward(0, stream);
    const Tensor h = l0_.forward(input_, stream);
    after_forward(0, stream);
    if (mistake_ == Mistake::after_forward_twice) after_forward(0, stream);
    before_forward(1, stream);
    const std::vector<float> y = l1_.forward(h, stream).to_vector<float>();
    after_forward(1, stream);
    double sum = 0;
    for (const float v : y) sum += v;
    return static_cast<float>(sum / static_cast<double>(y.size()));
  }

  void backward(float loss_scale, loom::StreamRef stream) override {
    const std::int64_t rows = input_.shape()[0];
    const Tensor dy = Tensor::from_vector(std::vector<float>(static_cast<std::size_t>(rows),
                                                             loss_scale / static_cast<float>(rows)),
                                          {rows, 1});
    const bool hooks_1 = mistake_ != Mistake::no_backward_hooks_for_unit_1;
    if (hooks_1) before_backward(1, stream);
    const Tensor dh = l1_.backward(dy, stream);
    if (hooks_1) after_backward(1, stream);
    before_backward(0, stream);
    l0_.backward(dh, stream);
    after_backward(0, stream);
  }

  loom::model::ParameterSpace& parameter_space() noexcept override { return *space_; }
  const loom::model::ParameterSpace& parameter_space() const noexcept override { return *space_; }
  loom::Device device() const noexcept override { return loom::Device::cpu(); }
  const loom::model::Precision& precision() const noexcept override { return precision_; }
  std::string architecture_name() const override { return "two-layers"; }
  std::vector<std::pair<std::string, std::int64_t>> architecture() const override { return {{"inputs", 8}}; }

 private:
  Mistake mistake_;
  loom::model::Precision precision_ = loom::model::Precision::fp32();
  loom::nn::Linear l0_, l1_;
  std::unique_ptr<loom::model::ParameterSpace> space_;
  Tensor input_;
};

std::string first_step_error(loom::model::Model& model, loom::comm::Communicator* comm, int zero) {
  loom::test::GlobalBatchSlice data(4, comm != nullptr ? 2 * comm->rank() : 0, comm != nullptr ? 2 : 4);
  loom::train::TrainerOptions options;
  options.schedule.total = 1;  // max_lr for the first step, min_lr after
  options.zero = zero;
  loom::train::Trainer trainer(model, data, options, comm);
  return loom::test::error_message([&] {
    trainer.step();
    trainer.step();  // a second step is not audited again
  });
}

}  // namespace

TEST_CASE("a model that calls its unit hooks in pairs passes the audit, and a misuse is named", "[model][train]") {
  TwoLayers good(Mistake::none);
  {
    loom::model::HookAudit audit(good);
    CHECK(audit.problem() == "unit 0 ('l0') never got before_forward(0) and after_forward(0)");
    const Tensor tokens = Tensor::zeros({2, 8}, loom::DType::i32);
    good.forward(tokens, tokens, {});
    good.backward(1.0f, {});
    CHECK(audit.problem().empty());
    CHECK_NOTHROW(audit.check());
  }
  CHECK(first_step_error(good, nullptr, 0) == "no error");
  TwoLayers twice(Mistake::after_forward_twice);
  CHECK_THAT(first_step_error(twice, nullptr, 0),
             Catch::Contains("after_forward(0) of unit 'l0' came without before_forward(0) before it") &&
                 Catch::Contains("loom/model/model.hpp"));
  TwoLayers forgetful(Mistake::no_backward_hooks_for_unit_1);
  CHECK_THAT(first_step_error(forgetful, nullptr, 0),
             Catch::Contains("unit 1 ('l1') never got before_backward(1) and after_backward(1)"));
}

TEST_CASE("under ZeRO-2 a model without its backward hooks is told which hooks, at the layer", "[model][train][zero]") {
  std::vector<std::string> errors(2), controls(2);
  loom::comm::run_in_process(2, [&](loom::comm::Communicator& comm) {
    const auto r = static_cast<std::size_t>(comm.rank());
    TwoLayers good(Mistake::none, loom::shard::space_layout(2, &comm));
    controls[r] = first_step_error(good, &comm, 2);
    TwoLayers forgetful(Mistake::no_backward_hooks_for_unit_1, loom::shard::space_layout(2, &comm));
    errors[r] = first_step_error(forgetful, &comm, 2);
  });
  for (std::size_t r = 0; r < 2; ++r) {
    CHECK(controls[r] == "no error");
    CHECK_THAT(errors[r], Catch::Contains("'l1.weight' has no gradient storage") &&
                              Catch::Contains("before_backward(u) and after_backward(u)"));
  }
}
