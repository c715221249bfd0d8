// Host memory by category during training (loom/core/memory_category.hpp, StepResult::memory_*):
// a GPT's values, gradients and AdamW state land in their categories to the byte of
// shard::model_state_bytes, the layers' buffers in activations, the categories add up to the
// allocator's total, and under ZeRO-2 the gradient pool and under ZeRO-3 the gathered values count
// where the memory model puts them.
#include <catch2/catch.hpp>

#include <algorithm>

#include "loom/core/allocator.hpp"
#include "loom/nn/gpt.hpp"
#include "loom/shard/memory.hpp"
#include "loom/train/trainer.hpp"
#include "support/ddp_equivalence.hpp"
#include "support/tiny_gpt.hpp"

using loom::MemoryCategory;

namespace {

std::int64_t at(const loom::CategoryBytes& bytes, MemoryCategory c) { return bytes[static_cast<std::size_t>(c)]; }

}  // namespace

TEST_CASE("a training step's host memory is counted by category, to the byte of the model state",
          "[train][memory]") {
  for (const auto& precision : {loom::nn::Precision::fp32(), loom::nn::Precision::bf16()}) {
    INFO(precision.name());
    const loom::CpuMemoryStats before = loom::cpu_memory_stats();
    loom::nn::GPT model(loom::test::tiny_gpt(32, 8), precision, loom::Device::cpu(), 4);
    loom::test::GlobalBatchSlice data(4, 0, 4);
    loom::train::Trainer trainer(model, data, loom::test::tiny_trainer_options(0));
    const loom::train::StepResult r = trainer.step();
    const loom::CpuMemoryStats after = loom::cpu_memory_stats();
    loom::CategoryBytes added{};
    std::int64_t sum = 0;
    for (std::size_t c = 0; c < loom::memory_category_count; ++c) {
      added[c] = after.live_by_category[c] - before.live_by_category[c];
      sum += after.live_by_category[c];
    }
    CHECK(sum == after.live_bytes);  // the categories add up to the allocator's total
    const loom::shard::ModelStateBytes state = trainer.predicted_model_state();
    CHECK(at(added, MemoryCategory::parameters) == state.values);
    CHECK(at(added, MemoryCategory::gradients) == state.gradients);
    CHECK(at(added, MemoryCategory::optimizer) == state.optimizer());
    CHECK(at(added, MemoryCategory::activations) > 0);
    // What the step reports: the same live counts, and a peak no lower than them.
    CHECK(r.memory_live == after.live_by_category);
    CHECK(r.memory_peak_total >= after.live_bytes);
    CHECK(at(r.memory_peak, MemoryCategory::activations) >= at(r.memory_live, MemoryCategory::activations));
    CHECK(loom::train::largest_category(r).second == *std::max_element(r.memory_peak.begin(), r.memory_peak.end()));
  }
}
