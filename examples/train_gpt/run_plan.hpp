// What this run will need, before it allocates it (plan/): the memory a micro-batch needs per rank
// by category, the one-line summary a normal start prints, the fuller view --plan prints, and
// --batch auto.
//
// Memory per rank is predicted from loom's own models: the model state by train::predict_model_state
// (shard::model_state_bytes for the trainer's optimizer and ZeRO options) on the built model, the
// activations by plan::predict_activations, plus what the process holds at that point that is
// neither (CPU only; the data and the trainer's communication copies come later and are left to
// the headroom), against what there is: LOOM_MEMORY_LIMIT on the CPU (or the machine's RAM), the
// GPU's memory less 2 GiB for the CUDA context and library workspaces on CUDA; 10% is kept free.
//
// --batch auto (Marian's --mini-batch-fit, from loom's models): the largest divisor of
// --batch-per-step whose prediction fits is the micro-batch, and gradient accumulation makes up
// the rest. On the CPU under DDP or ZeRO-1 a probe forward and backward at that size then confirms
// it, with the cap lowered by the model state the trainer has yet to allocate (its optimizer
// state), stepping down on an out-of-memory error; elsewhere the prediction alone decides (ZeRO-2
// and 3 need the trainer's gradient buffers and gathers, tensor parallelism the group's
// collectives, and a GPU has no cap to lower). The ranks agree on the smallest choice.
#pragma once

#include <cstdint>
#include <string>

#include "loom/comm/communicator.hpp"
#include "loom/nn/gpt.hpp"
#include "loom/optim/optimizer.hpp"
#include "loom/plan/activations.hpp"
#include "loom/shard/memory.hpp"
#include "loom/train/trainer.hpp"

namespace train_gpt {

struct RunShape {
  std::int64_t seq_len = 0;  // 0: the model's context
  loom::train::TrainerOptions options{};  // optimizer, ZeRO stage and options
  int data_ranks = 1;
  int tensor_ranks = 1;
};

struct RunMemory {
  loom::shard::ModelStateBytes model_state;
  loom::plan::ActivationBytes activations;
  std::int64_t other = 0;     // the process's live bytes now in other categories (CPU)
  std::int64_t capacity = 0;  // what there is (less the CUDA reserve on a GPU)
  std::string source;         // where that figure comes from ("LOOM_MEMORY_LIMIT", "cuda:0's memory", ...)
  std::int64_t total() const noexcept { return model_state.total() + activations.total() + other; }
  std::int64_t usable() const noexcept { return capacity / 10 * 9; }
};

RunMemory predict_run_memory(const loom::nn::GPT& model, const RunShape& shape, std::int64_t micro_batch);

// "plan: 19.3 of 28.8 MiB usable per rank (LOOM_MEMORY_LIMIT 32.0 MiB less 10%): model state 2.6
// (values 0.7, gradients 0.7, optimizer 1.3), activations 16.0 (blocks 14.9, attention 0.8,
// logits 0.3), other 0.7"
std::string plan_line(const RunMemory& memory);

// train_gpt --plan: this run's plan line, then the predicted memory per rank of every ZeRO stage
// (with data parallelism) and checkpointing mode at this micro-batch, this run's marked; on GPUs
// of the peak table, loom-plan's full report for the detected topology (plan/plan.hpp).
std::string plan_report(const loom::nn::GPT& model, const RunShape& shape, std::int64_t micro_batch,
                        std::int64_t grad_accumulation, const std::string& precision);

struct BatchChoice {
  std::int64_t micro_batch = 0;
  std::int64_t grad_accumulation = 0;
  std::string line;  // the start-up line: what was chosen and why
};

// per_step: sequences per rank per step. world: to agree (null: one process). Throws an
// out_of_memory Error when not even one sequence per micro-batch fits.
BatchChoice choose_batch(loom::nn::GPT& model, const RunShape& shape, std::int64_t per_step,
                         loom::comm::Communicator* world);

}  // namespace train_gpt
