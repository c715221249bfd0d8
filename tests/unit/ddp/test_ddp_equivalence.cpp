// Data-parallel training equals single-process training with the same global batch: N = 2, 3, 4
// in-process ranks with per-rank batch B against one process with batch N x B, with and without
// gradient accumulation, reduced in fp32 and compressed to bf16. (tests/dist runs the same
// scenario across MPI processes.)
#include <catch2/catch.hpp>

#include "loom/comm/in_process.hpp"
#include "support/ddp_equivalence.hpp"

TEST_CASE("N ranks with batch B train like one process with batch N x B", "[ddp]") {
  for (int ranks : {2, 3, 4}) {
    for (std::int64_t accumulation : {1, 2}) {
      for (loom::DType reduction : {loom::DType::f32, loom::DType::bf16}) {
        INFO(ranks << " ranks, " << accumulation << " micro-batches, " << loom::dtype_name(reduction) << " reduction");
        loom::test::EquivalenceCase c;
        c.accumulation = accumulation;
        c.reduction = reduction;
        std::vector<loom::test::EquivalenceResult> results(static_cast<std::size_t>(ranks));
        loom::comm::run_in_process(ranks, [&](loom::comm::Communicator& comm) {
          results[static_cast<std::size_t>(comm.rank())] = loom::test::run_ddp_equivalence(comm, c);
        });
        for (const auto& r : results) {
          REQUIRE(r.error.empty());
          CHECK(r.buckets > 1);
          CHECK(r.tokens_per_step == ranks * c.batch_per_rank * 8 * accumulation);
          CHECK(r.max_update > 1e-3);  // the weights really moved
          // fp32: summation order only. bf16: each gradient rounded to 8 bits before averaging.
          const double tolerance = reduction == loom::DType::f32 ? 2e-6 : 2e-2 * r.max_update;
          INFO("max |difference| " << r.max_weight_diff << ", max |update| " << r.max_update);
          CHECK(r.max_weight_diff <= tolerance);
          CHECK(r.first_loss_diff <= 1e-5);
          CHECK(r.max_norm_rel_diff <= (reduction == loom::DType::f32 ? 1e-5 : 2e-2));
        }
      }
    }
  }
}
