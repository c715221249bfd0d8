#include "loom/shard/memory.hpp"

#include <algorithm>
#include <functional>
#include <vector>

#include "loom/core/error.hpp"

namespace loom::shard {

namespace {

// The bytes of a pool holding the root units' buffers and the `others` largest other units'.
std::int64_t pool_bytes(std::span<const std::int64_t> unit_elements, std::span<const std::size_t> roots,
                        std::size_t others, std::int64_t element_bytes) {
  std::vector<bool> is_root(unit_elements.size(), false);
  std::int64_t elements = 0;
  for (const std::size_t r : roots) {
    if (r < is_root.size() && !is_root[r]) {
      is_root[r] = true;
      elements += unit_elements[r];
    }
  }
  std::vector<std::int64_t> rest;
  for (std::size_t u = 0; u < unit_elements.size(); ++u) {
    if (!is_root[u]) rest.push_back(unit_elements[u]);
  }
  std::sort(rest.begin(), rest.end(), std::greater<>());
  for (std::size_t i = 0; i < std::min(others, rest.size()); ++i) elements += rest[i];
  return elements * element_bytes;
}

}  // namespace

ModelStateBytes model_state_bytes(std::int64_t elements, DType storage, optim::OptimizerKind optimizer, int stage,
                                  int ranks) {
  require(stage >= 0 && stage <= 3, "model_state_bytes: stage must be 0, 1, 2 or 3, got ", stage);
  require(ranks >= 1 && elements >= 0 && elements % ranks == 0, "model_state_bytes: need ranks >= 1 and a "
          "non-negative element count divisible by them, got ", elements, " elements at ", ranks, " ranks");
  const std::int64_t shard = elements / ranks;
  const std::int64_t owned = stage >= 1 ? shard : elements;  // what the optimizer keeps state for
  constexpr std::int64_t f32 = 4;
  ModelStateBytes bytes;
  bytes.values = (stage >= 3 ? shard : elements) * static_cast<std::int64_t>(dtype_size(storage));
  bytes.gradients = (stage >= 2 ? shard : elements) * f32;
  bytes.masters = storage == DType::f32 ? 0 : owned * f32;
  bytes.moments = optim::moments_per_element(optimizer) * owned * f32;
  return bytes;
}

ModelStateBytes model_state_bytes(const model::ParameterSpace& space, DType storage, optim::OptimizerKind optimizer,
                                  int stage, int ranks, std::span<const std::size_t> root_units, bool keep_gathered) {
  const std::vector<std::int64_t> units = space.unit_elements_at(ranks);
  return model_state_bytes(units, storage, optimizer, stage, ranks, root_units, keep_gathered);
}

ModelStateBytes model_state_bytes(std::span<const std::int64_t> units, DType storage, optim::OptimizerKind optimizer,
                                  int stage, int ranks, std::span<const std::size_t> root_units, bool keep_gathered) {
  std::int64_t elements = 0;
  for (const std::int64_t u : units) elements += u;
  ModelStateBytes bytes = model_state_bytes(elements, storage, optimizer, stage, ranks);
  // The gradient pool holds three buffers: the roots take their places first.
  if (stage >= 2) {
    const std::size_t roots = std::min<std::size_t>(root_units.size(), 3);
    bytes.buffers += pool_bytes(units, root_units.subspan(0, roots), 3 - roots, 4);
  }
  if (stage >= 3) {
    bytes.buffers += pool_bytes(units, root_units, keep_gathered ? units.size() : 2,
                                static_cast<std::int64_t>(dtype_size(storage)));
  }
  return bytes;
}

ModelStateBytes model_state_bytes(const model::Model& model, optim::OptimizerKind optimizer, int stage, int ranks,
                                  bool keep_gathered) {
  const model::ParameterSpace& space = model.parameter_space();
  const std::vector<std::size_t> roots = model.root_units();
  return model_state_bytes(space, space.storage(), optimizer, stage, ranks, roots, keep_gathered);
}

}  // namespace loom::shard
