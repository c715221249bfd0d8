// What ZeRO saves, measured in each MPI process (one rank each): a 4-layer, 128-wide GPT with
// AdamW, in fp32 and bf16, at stages 0-3. The optimizer state ZeRO keeps per rank is DDP's divided
// by the ranks; the model state each rank holds after construction (values, gradients, masters,
// moments), measured by the CPU allocator, is what shard::model_state_bytes predicts; and the unit
// buffers the engine allocates during the steps (ZeRO-2/3's gradient pool, ZeRO-3's gathered
// values: their tensors' bytes) are the predicted ones; the allocator's peak while the model and
// trainer are built is the state they keep (the model is built in shard::space_layout's layout),
// and its peak during forward and backward, less DDP's (activations), is that state plus the unit
// buffers; all within 5%.
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
  std::int64_t step_peak = 0;    // the allocator's peak during two steps, above the live bytes before them
  loom::shard::ModelStateBytes predicted;
};

Measured measure(loom::comm::Communicator& comm, const std::string& precision, int stage) {
  const loom::nn::GPTConfig config{.vocab_size = 32, .context = 8, .layers = 4, .heads = 4, .channels = 128};
  Measured m;
  const std::int64_t start = loom::cpu_memory_stats().live_bytes;
  loom::reset_cpu_memory_peak();
  // Built in the layout its stage trains in, as train_gpt does: no rank ever holds more than its share.
  loom::nn::GPT model(config, loom::nn::Precision::parse(precision), loom::Device::cpu(), 1337,
                      loom::shard::space_layout(stage, &comm));
  loom::test::GlobalBatchSlice data(2 * comm.size(), 2 * comm.rank(), 2);
  loom::train::TrainerOptions options;
  options.schedule.total = 1;  // max_lr for the first step, min_lr after
  options.zero = stage;
  loom::train::Trainer trainer(model, data, options, &comm);
  m.model_state = loom::cpu_memory_stats().live_bytes - start;
  m.construction_peak = loom::cpu_memory_stats().peak_bytes - start;
  m.optimizer = trainer.optimizer().state_bytes();
  const std::int64_t before_steps = loom::cpu_memory_stats().live_bytes;
  loom::reset_cpu_memory_peak();
  for (int s = 0; s < 2; ++s) trainer.step();
  m.step_peak = loom::cpu_memory_stats().peak_bytes - before_steps;
  m.buffers = trainer.held_model_state().buffers;
  m.predicted = trainer.predicted_model_state();
  return m;
}

double ratio(std::int64_t measured, std::int64_t predicted) {
  return static_cast<double>(measured) / static_cast<double>(predicted);
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
                     << m.predicted.buffers << "), construction peak " << m.construction_peak << ", step peak "
                     << m.step_peak << " (DDP " << ddp.step_peak << ")");
      if (stage > 0) CHECK(std::fabs(m.optimizer / (ddp.optimizer / ranks) - 1.0) <= 0.05);
      CHECK(std::fabs(ratio(m.model_state, m.predicted.persistent()) - 1.0) <= 0.05);
      // Building never holds more than the stage keeps (no full copy on the way to a shard).
      CHECK(std::fabs(ratio(m.construction_peak, m.predicted.persistent()) - 1.0) <= 0.05);
      // During the steps (forward and backward): the model state at its peak is what the stage keeps
      // plus its unit buffers; the activations and scratch, the same at every stage, are DDP's step
      // peak, which holds no unit buffers.
      const std::int64_t state_peak = m.model_state + m.step_peak - ddp.step_peak;
      CHECK(std::fabs(ratio(state_peak, m.predicted.persistent() + m.predicted.buffers) - 1.0) <= 0.05);
      if (stage >= 2) {
        CHECK(std::fabs(static_cast<double>(m.buffers) / static_cast<double>(m.predicted.buffers) - 1.0) <= 0.05);
      } else {
        CHECK(m.buffers == 0);
        CHECK(m.predicted.buffers == 0);
      }
    }
  }
}
