// What model state costs per rank: the prediction ZeRO's memory savings are checked against
// (the CPU allocator's live bytes and the CUDA caching allocator's statistics measure it).
// Per parameter element with loom's fp32 gradients and fp32 optimizer state (N ranks, AdamW):
//   storage bf16/fp16: DDP 2 + 4 + 4 + 8 = 18 bytes; ZeRO-1 2 + 4 + 12/N; ZeRO-2 2 + 16/N
//   storage f32:       DDP 4 + 4 + 8 = 16 bytes;     ZeRO-1 4 + 4 + 8/N;  ZeRO-2 4 + 12/N
// (values, gradients, masters, moments), on the space's padded element count.
#pragma once

#include <cstdint>

#include "loom/core/dtype.hpp"
#include "loom/model/parameter_space.hpp"
#include "loom/optim/optimizer.hpp"

namespace loom::shard {

struct ModelStateBytes {
  std::int64_t values = 0;     // the parameters in the storage dtype (every rank holds all)
  std::int64_t gradients = 0;  // fp32: all of them, or the rank's shard (ZeRO-2)
  std::int64_t masters = 0;    // fp32 copies of 16-bit parameters
  std::int64_t moments = 0;    // the optimizer's fp32 state besides masters
  std::int64_t optimizer() const noexcept { return masters + moments; }
  std::int64_t total() const noexcept { return values + gradients + masters + moments; }
};

// Per rank, for `elements` padded parameter elements (a multiple of ranks, as a ParameterSpace
// laid out for `ranks` has). stage: 0 (DDP), 1 or 2.
ModelStateBytes model_state_bytes(std::int64_t elements, DType storage, optim::OptimizerKind optimizer, int stage,
                                  int ranks);
// The same for a model's parameter space laid out for `ranks` (its padding included).
ModelStateBytes model_state_bytes(const model::ParameterSpace& space, DType storage, optim::OptimizerKind optimizer,
                                  int stage, int ranks);

}  // namespace loom::shard
