#include "loom/shard/memory.hpp"

#include "loom/core/error.hpp"

namespace loom::shard {

ModelStateBytes model_state_bytes(std::int64_t elements, DType storage, optim::OptimizerKind optimizer, int stage,
                                  int ranks) {
  require(stage >= 0 && stage <= 2, "model_state_bytes: stage must be 0, 1 or 2, got ", stage);
  require(ranks >= 1 && elements >= 0 && elements % ranks == 0, "model_state_bytes: need ranks >= 1 and a "
          "non-negative element count divisible by them, got ", elements, " elements at ", ranks, " ranks");
  const std::int64_t shard = elements / ranks;
  const std::int64_t owned = stage >= 1 ? shard : elements;  // what the optimizer keeps state for
  constexpr std::int64_t f32 = 4;
  ModelStateBytes bytes;
  bytes.values = elements * static_cast<std::int64_t>(dtype_size(storage));
  bytes.gradients = (stage >= 2 ? shard : elements) * f32;
  bytes.masters = storage == DType::f32 ? 0 : owned * f32;
  bytes.moments = optim::moments_per_element(optimizer) * owned * f32;
  return bytes;
}

ModelStateBytes model_state_bytes(const model::ParameterSpace& space, DType storage, optim::OptimizerKind optimizer,
                                  int stage, int ranks) {
  return model_state_bytes(space.elements_at(ranks), storage, optimizer, stage, ranks);
}

}  // namespace loom::shard
