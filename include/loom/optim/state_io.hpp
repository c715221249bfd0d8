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

// The full state. An unsharded optimizer returns views of its own buffers (comm may be null). A
// sharded one is a collective over comm: the shards are all-gathered one unit at a time through
// one unit-sized buffer, and rank 0 receives the full state in host memory while the other ranks
// get an empty list (no rank holds more than one unit of gathered state on its device). A failure
// to allocate on any rank is an error on every rank before anything is gathered.
std::vector<StateTensor> gather_state(const Optimizer& optimizer, comm::Communicator* comm, StreamRef stream = {});

// The name and shape of every full state tensor (all f32), to check a file before loading.
std::vector<std::pair<std::string, Shape>> state_layout(const Optimizer& optimizer);

// Copies this optimizer's part of every full tensor into its state. `full` must hold every name of
// state_layout() with its shape (checked before anything is copied).
void scatter_state(Optimizer& optimizer, const std::map<std::string, Tensor>& full);

}  // namespace loom::optim
