// A data-parallel job in which one rank fails, for tests/dist/fail_fast.sh: the last rank throws in
// its forward (mode "forward": a token outside the vocabulary) or in its optimizer step (mode
// "optimizer": once its backward is done its values are sharded, which a DDP optimizer updating
// every value refuses) at step 3, while the
// others carry on into their collectives. Every rank prints "rank R: <its error>" and exits 1; the
// script checks that they all do so within seconds (the communicator timeout is 300 s) and that
// each names the failed rank and its message. ZeRO stage as the second argument (default 0). Mode
// "unwind": the last rank throws outside loom with its World inside the try (see unwind()).
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>

#include "loom/core/error.hpp"
#include "loom/loom.hpp"
#include "loom/nn/gpt.hpp"
#include "loom/train/trainer.hpp"
#include "support/ddp_equivalence.hpp"

namespace {

// The World inside the try, as a user may write it: the last rank throws while the others wait in a
// barrier, and its World is destroyed while the exception unwinds.
int unwind(int argc, char** argv) {
  int rank = -1;
  try {
    const std::unique_ptr<loom::World> world = loom::init(argc, argv);
    rank = world->rank();
    if (rank == world->size() - 1) throw std::runtime_error("a failure outside loom");
    world->comm().barrier().wait();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "forward";
  const int stage = argc > 2 ? std::atoi(argv[2]) : 0;
  if (mode == "unwind") return unwind(argc, argv);
  const std::unique_ptr<loom::World> world = loom::init(argc, argv);
  const int rank = world->rank(), last = world->size() - 1;
  try {
    loom::nn::GPT model({.vocab_size = 32, .context = 8, .layers = 2, .heads = 2, .channels = 16},
                        loom::nn::Precision::fp32(), loom::Device::cpu());
    loom::test::BadBatchAt data(loom::test::GlobalBatchSlice(2 * world->size(), 2 * rank, 2),
                                mode == "forward" && rank == last ? 2 : -1);
    loom::train::TrainerOptions options;
    options.schedule.total = 1;  // max_lr for the first step, min_lr after
    options.zero = stage;
    loom::train::Trainer trainer(model, data, options, &world->comm());
    int step = 0;
    if (mode == "optimizer" && rank == last) {
      // After the root unit's backward (the last hook of a backward), before the optimizer.
      model.add_unit_hooks({{}, {}, {}, [&](std::size_t unit, loom::StreamRef) {
                              if (unit == 0 && step == 3) model.parameter_space().shard_values(rank);
                            }});
    }
    for (step = 1; step <= 10; ++step) trainer.step();
    std::printf("rank %d: finished\n", rank);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    std::fflush(stderr);
    return 1;
  }
}
