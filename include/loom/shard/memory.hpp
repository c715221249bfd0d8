// What model state costs per rank: the prediction ZeRO's memory savings are checked against
// (the CPU allocator's live bytes and the CUDA caching allocator's statistics measure it).
// Per parameter element with loom's fp32 gradients and fp32 optimizer state (N ranks, AdamW):
//   storage bf16/fp16: DDP 2 + 4 + 4 + 8 = 18 bytes; ZeRO-1 2 + 4 + 12/N; ZeRO-2 2 + 16/N;
//                      ZeRO-3 18/N
//   storage f32:       DDP 4 + 4 + 8 = 16 bytes;     ZeRO-1 4 + 4 + 8/N;  ZeRO-2 4 + 12/N;
//                      ZeRO-3 16/N
// (values, gradients, masters, moments), on the space's padded element count, plus the unit
// buffers the engine holds while a step runs: ZeRO-2 and 3 keep a pool of at most three fp32
// full-unit gradient buffers (the root units' and the two largest others: one computing, one
// reducing), and ZeRO-3 a pool of gathered values in the storage dtype (the root units' and the
// two largest others: one in use, one prefetched; every unit when the values are kept gathered
// from forward to backward).
#pragma once

#include <cstdint>
#include <span>

#include "loom/core/dtype.hpp"
#include "loom/model/model.hpp"
#include "loom/model/parameter_space.hpp"
#include "loom/optim/optimizer.hpp"

namespace loom::shard {

struct ModelStateBytes {
  std::int64_t values = 0;     // the parameters in the storage dtype (all, or the rank's shard at stage 3)
  std::int64_t gradients = 0;  // fp32: all of them, or the rank's shard (ZeRO-2, 3)
  std::int64_t masters = 0;    // fp32 copies of 16-bit parameters
  std::int64_t moments = 0;    // the optimizer's fp32 state besides masters
  std::int64_t buffers = 0;    // ZeRO-2/3 gradient pool and ZeRO-3 gathered values, at their peak
  std::int64_t optimizer() const noexcept { return masters + moments; }
  // What lives for the whole run, and with the step's buffers at their peak.
  std::int64_t persistent() const noexcept { return values + gradients + masters + moments; }
  std::int64_t total() const noexcept { return persistent() + buffers; }
};

// Per rank, for `elements` padded parameter elements (a multiple of ranks, as a ParameterSpace
// laid out for `ranks` has). stage: 0 (DDP), 1, 2 or 3. Without the unit buffers (they depend on
// the units: the overloads below).
ModelStateBytes model_state_bytes(std::int64_t elements, DType storage, optim::OptimizerKind optimizer, int stage,
                                  int ranks);
// The same for a model's parameter space laid out for `ranks` (its padding included), with the
// unit buffers for its root units; keep_gathered: ZeRO-3 keeps every unit gathered from forward
// to backward (ZeroOptions::keep_gathered_for_backward or _across_micro_batches).
ModelStateBytes model_state_bytes(const model::ParameterSpace& space, DType storage, optim::OptimizerKind optimizer,
                                  int stage, int ranks, std::span<const std::size_t> root_units = {},
                                  bool keep_gathered = false);
ModelStateBytes model_state_bytes(const model::Model& model, optim::OptimizerKind optimizer, int stage, int ranks,
                                  bool keep_gathered = false);
// The same from the units' padded element counts at `ranks` (model::padded_unit_elements): for a
// model that is planned, not built (plan/).
ModelStateBytes model_state_bytes(std::span<const std::int64_t> unit_elements, DType storage,
                                  optim::OptimizerKind optimizer, int stage, int ranks,
                                  std::span<const std::size_t> root_units = {}, bool keep_gathered = false);

}  // namespace loom::shard
