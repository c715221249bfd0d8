// What ZeRO saves, measured by the CPU allocator in each MPI process (one rank each): a 4-layer,
// 128-wide GPT with AdamW, in fp32 and bf16. The optimizer state ZeRO keeps per rank is DDP's
// divided by the ranks, and the model state each rank holds (values, gradients, masters,
// moments) is what shard::model_state_bytes predicts, both within 5%.
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <string>

#include "loom/comm/mpi.hpp"
#include "loom/core/allocator.hpp"
#include "loom/ddp/gradient_reducer.hpp"
#include "loom/nn/gpt.hpp"
#include "loom/optim/adamw.hpp"
#include "loom/shard/memory.hpp"
#include "loom/shard/zero.hpp"

namespace {

struct Measured {
  std::int64_t optimizer = 0;    // live bytes the optimizer's construction added
  std::int64_t model_state = 0;  // live bytes of model + engine + optimizer, before any forward
  std::int64_t predicted = 0;    // shard::model_state_bytes
};

Measured measure(loom::comm::Communicator& comm, const std::string& precision, int stage) {
  const loom::nn::GPTConfig config{.vocab_size = 256, .context = 64, .layers = 4, .heads = 4, .channels = 128};
  const std::int64_t start = loom::cpu_memory_stats().live_bytes;
  Measured m;
  loom::nn::GPT model(config, loom::nn::Precision::parse(precision), loom::Device::cpu());
  std::unique_ptr<loom::ddp::GradientReducer> ddp;
  std::unique_ptr<loom::shard::ZeroEngine> zero;
  std::vector<loom::model::ShardRange> ranges;
  if (stage == 0) {
    ddp = std::make_unique<loom::ddp::GradientReducer>(comm, model.parameter_space());
  } else {
    zero = std::make_unique<loom::shard::ZeroEngine>(comm, model, stage);
    ranges = zero->ranges();
  }
  const std::int64_t before_optimizer = loom::cpu_memory_stats().live_bytes;
  loom::optim::AdamW adamw(model.parameter_space(), {}, ranges);
  m.optimizer = loom::cpu_memory_stats().live_bytes - before_optimizer;
  m.model_state = loom::cpu_memory_stats().live_bytes - start;
  const loom::model::ParameterSpace& space = model.parameter_space();
  m.predicted = loom::shard::model_state_bytes(space, space.storage(), loom::optim::OptimizerKind::adamw, stage,
                                               comm.size()).total();
  return m;
}

}  // namespace

TEST_CASE("ZeRO's optimizer state is DDP's over the ranks, and model state is as predicted", "[dist][zero]") {
  std::unique_ptr<loom::comm::Communicator> comm = loom::comm::make_mpi_world_communicator();
  const double ranks = comm->size();
  for (const std::string precision : {"fp32", "bf16"}) {
    const Measured ddp = measure(*comm, precision, 0);
    for (int stage : {0, 1, 2}) {
      const Measured m = stage == 0 ? ddp : measure(*comm, precision, stage);
      INFO(precision << ", stage " << stage << ", " << comm->size() << " ranks: optimizer " << m.optimizer
                     << " bytes (DDP " << ddp.optimizer << "), model state " << m.model_state << " bytes (predicted "
                     << m.predicted << ")");
      if (stage > 0) CHECK(std::fabs(m.optimizer / (ddp.optimizer / ranks) - 1.0) <= 0.05);
      CHECK(std::fabs(static_cast<double>(m.model_state) / static_cast<double>(m.predicted) - 1.0) <= 0.05);
    }
  }
}
