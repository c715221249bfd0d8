// Optimizer state as checkpoints hold it: one full tensor per parameter and kind
// ("<param>.<kind>", shaped like the parameter), whatever the number of ranks and the ZeRO stage
// that wrote or reads it.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "loom/comm/communicator.hpp"
#include "loom/optim/optimizer.hpp"

namespace loom::optim {

// The full state. A sharded optimizer's shards are all-gathered unit by unit over comm (a
// collective: every rank of the data-parallel group calls it, and every rank gets the whole
// state); an unsharded one returns views of its own buffers and comm may be null.
std::vector<StateTensor> gather_state(const Optimizer& optimizer, comm::Communicator* comm);

// The name and shape of every full state tensor (all f32), to check a file before loading.
std::vector<std::pair<std::string, Shape>> state_layout(const Optimizer& optimizer);

// Copies this optimizer's part of every full tensor into its state. `full` must hold every name of
// state_layout() with its shape (checked before anything is copied).
void scatter_state(Optimizer& optimizer, const std::map<std::string, Tensor>& full);

}  // namespace loom::optim
