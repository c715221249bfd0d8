// What ZeRO saves, measured in each MPI process (one rank each): a 4-layer, 128-wide GPT with
// AdamW, in fp32 and bf16, at stages 0-3. The optimizer state ZeRO keeps per rank is DDP's divided
// by the ranks; the model state each rank holds after construction (values, gradients, masters,
// moments), measured by the CPU allocator, is what shard::model_state_bytes predicts; and the unit
// buffers the engine allocates during the steps (ZeRO-2/3's gradient pool, ZeRO-3's gathered
// values: their tensors' bytes) are the predicted ones; all within 5%.
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <string>

#include "loom/comm/mpi.hpp"
#include "loom/core/allocator.hpp"
#include "loom/nn/gpt.hpp"
#include "loom/shard/memory.hpp"
#include "loom/train/trainer.hpp"
#include "support/ddp_equivalence.hpp"

namespace {

struct Measured {
  std::int64_t optimizer = 0;    // the optimizer's state bytes
  std::int64_t model_state = 0;  // live bytes that building the model and the trainer added
  std::int64_t buffers = 0;      // the engine's unit buffers after two steps (their peak)
  std::int64_t construction_peak = 0;  // the allocator's peak while building them
  loom::shard::ModelStateBytes predicted;
};

Measured measure(loom::comm::Communicator& comm, const std::string& precision, int stage) {
  const loom::nn::GPTConfig config{.vocab_size = 32, .context = 8, .layers = 4, .heads = 4, .channels = 128};
  Measured m;
  const std::int64_t start = loom::cpu_memory_stats().live_bytes;
  loom::reset_cpu_memory_peak();
  loom::nn::GPT model(config, loom::nn::Precision::parse(precision), loom::Device::cpu());
  loom::test::GlobalBatchSlice data(2 * comm.size(), 2 * comm.rank(), 2);
  loom::train::TrainerOptions options;
  options.zero = stage;
  loom::train::Trainer trainer(model, data, options, &comm);
  m.model_state = loom::cpu_memory_stats().live_bytes - start;
  m.construction_peak = loom::cpu_memory_stats().peak_bytes - start;
  m.optimizer = trainer.optimizer().state_bytes();
  for (int s = 0; s < 2; ++s) trainer.step();
  m.buffers = trainer.held_model_state().buffers;
  m.predicted = trainer.predicted_model_state();
  return m;
}

}  // namespace

TEST_CASE("ZeRO's optimizer state is DDP's over the ranks, and model state is as predicted", "[dist][zero]") {
  std::unique_ptr<loom::comm::Communicator> comm = loom::comm::make_mpi_world_communicator();
  const double ranks = comm->size();
  for (const std::string precision : {"fp32", "bf16"}) {
    const Measured ddp = measure(*comm, precision, 0);
    for (int stage : {0, 1, 2, 3}) {
      const Measured m = stage == 0 ? ddp : measure(*comm, precision, stage);
      INFO(precision << ", stage " << stage << ", " << comm->size() << " ranks: optimizer " << m.optimizer
                     << " bytes (DDP " << ddp.optimizer << "), model state " << m.model_state << " bytes (predicted "
                     << m.predicted.persistent() << "), unit buffers " << m.buffers << " (predicted "
                     << m.predicted.buffers << "), construction peak " << m.construction_peak);
      if (stage > 0) CHECK(std::fabs(m.optimizer / (ddp.optimizer / ranks) - 1.0) <= 0.05);
      CHECK(std::fabs(static_cast<double>(m.model_state) / static_cast<double>(m.predicted.persistent()) - 1.0) <= 0.05);
      if (stage >= 2) {
        CHECK(std::fabs(static_cast<double>(m.buffers) / static_cast<double>(m.predicted.buffers) - 1.0) <= 0.05);
      } else {
        CHECK(m.buffers == 0);
        CHECK(m.predicted.buffers == 0);
      }
    }
  }
}
