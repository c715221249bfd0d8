// What a rank's host memory holds while a sharded checkpoint is saved and loaded, measured in each
// MPI process (one rank each, run at 2, 3 and 4 ranks): a 4-layer, 128-wide GPT with AdamW under
// ZeRO-1 and ZeRO-3. Above what the rank held before, the CPU allocator's peak (and getrusage's
// maximum resident set) stays within
//   a synchronous save:   a fixed allowance (nothing is gathered or copied on the CPU);
//   an asynchronous save: this rank's own share (its host copy) plus the allowance;
//   a load:               what the rank holds (its staging) plus one piece plus the allowance.
// Every rank's share is the whole checkpoint's data over the ranks (within 10%), and the shares
// add up to it exactly: every element is written once, by one rank.
#include <catch2/catch.hpp>

#include <sys/resource.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>

#include "loom/comm/agreement.hpp"
#include "loom/comm/mpi.hpp"
#include "loom/core/allocator.hpp"
#include "loom/io/checkpoint.hpp"
#include "loom/nn/gpt.hpp"
#include "loom/train/trainer.hpp"
#include "support/ddp_equivalence.hpp"

namespace fs = std::filesystem;

namespace {

constexpr std::int64_t allowance = 1 << 20;  // headers, piece tables, agreement buffers

// How far the allocator's peak rose above the live bytes before fn.
template <class Fn>
std::int64_t peak_rise(Fn&& fn) {
  const std::int64_t before = loom::cpu_memory_stats().live_bytes;
  loom::reset_cpu_memory_peak();
  fn();
  return loom::cpu_memory_stats().peak_bytes - before;
}

std::int64_t max_resident_bytes() {
  struct rusage usage {};
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<std::int64_t>(usage.ru_maxrss) * 1024;
}

}  // namespace

TEST_CASE("saving and loading a sharded checkpoint holds a rank's own share, not the model", "[dist][checkpoint]") {
  std::unique_ptr<loom::comm::Communicator> comm = loom::comm::make_mpi_world_communicator();
  const loom::nn::GPTConfig config{.vocab_size = 32, .context = 8, .layers = 4, .heads = 4, .channels = 128};
  for (const int stage : {1, 3}) {
    const fs::path run = fs::temp_directory_path() /
                         ("loom_dist_ckpt_memory_np" + std::to_string(comm->size()) + "_zero" + std::to_string(stage));
    if (comm->rank() == 0) fs::remove_all(run);
    comm->barrier().wait();
    loom::nn::GPT model(config, loom::nn::Precision::fp32(), loom::Device::cpu(), 1337,
                        loom::shard::space_layout(stage, comm.get()));
    loom::test::GlobalBatchSlice data(2 * comm->size(), 2 * comm->rank(), 2);
    loom::train::TrainerOptions options;
    options.schedule.total = 4;
    options.zero = stage;
    loom::train::Trainer trainer(model, data, options, comm.get());
    trainer.step();
    // The whole checkpoint's data, from the parameters: fp32 values and each AdamW state kind.
    std::int64_t total = 0, largest_piece = 0;
    for (const loom::model::Parameter* p : model.parameter_space().parameters()) {
      total += 4 * p->shape().numel() * (1 + static_cast<std::int64_t>(trainer.optimizer().state_kinds().size()));
      largest_piece = std::max(largest_piece, 4 * p->shape().numel());
    }
    const std::int64_t rss_before = max_resident_bytes();
    const std::int64_t sync_rise = peak_rise([&] { trainer.save(run.string()); });
    trainer.step();
    std::int64_t share = 0;
    const std::int64_t async_rise = peak_rise([&] {
      trainer.save_async(run.string());
      trainer.wait_for_save();
      share = static_cast<std::int64_t>(trainer.finished_saves().at(0).bytes);
    });
    const std::int64_t rss_rise = max_resident_bytes() - rss_before;
    const loom::shard::ModelStateBytes held = trainer.held_model_state();
    const std::int64_t load_rise = peak_rise([&] { trainer.resume(run.string()); });
    const std::int64_t shares = loom::comm::all_reduce_value(*comm, share, loom::comm::ReduceOp::sum);
    INFO("ZeRO-" << stage << ", rank " << comm->rank() << " of " << comm->size() << ": checkpoint " << total
                 << " bytes, own share " << share << ", peak rise: sync save " << sync_rise << ", async save "
                 << async_rise << " (resident " << rss_rise << "), load " << load_rise << " (holds " << held.values
                 << " + " << held.optimizer() << ", largest piece " << largest_piece << ")");
    CHECK(shares == total);
    CHECK(static_cast<double>(share) <= 1.1 * static_cast<double>(total) / comm->size());
    CHECK(sync_rise <= allowance);
    CHECK(async_rise <= share + allowance);
    CHECK(rss_rise <= share + 4 * allowance);
    CHECK(load_rise <= held.values + held.optimizer() + largest_piece + allowance);
    comm->barrier().wait();
    if (comm->rank() == 0) fs::remove_all(run);
  }
}
