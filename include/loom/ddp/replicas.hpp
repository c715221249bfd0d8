// Keeping data-parallel replicas identical, and agreeing on host values across ranks. Each call is
// a collective: every rank of the communicator makes it, in the same order.
#pragma once

#include <cstdint>
#include <exception>
#include <string>
#include <span>
#include <string_view>

#include "loom/comm/communicator.hpp"
#include "loom/model/parameter.hpp"
#include "loom/model/parameter_space.hpp"

namespace loom::ddp {

// Throws an invalid_argument Error on every rank unless every rank has the same parameters (count,
// names, shapes, dtypes, in order: not their values); the message names the first difference and
// both ranks.
void verify_same_parameter_shapes(comm::Communicator& comm, std::span<model::Parameter* const> parameters);

// Throws an invalid_argument Error on every rank unless every rank holds the same values, bit for
// bit, naming the first parameter that differs and the ranks (a replica that diverged: a rank that
// skipped an update, a non-deterministic kernel, weights changed on one rank). It compares a 64-bit
// checksum of each parameter's values (one read of the values, on the host: a device model is
// copied there first), so it is cheap enough to call every few hundred steps. The space's values
// must be full (DDP, ZeRO-1/2 after their gather): under ZeRO-3 each rank holds other slices.
void verify_same_values(comm::Communicator& comm, const model::ParameterSpace& space);

// What DDP and ZeRO do before their first step: lay the space out for comm's ranks, check that
// every rank has the same parameters and the same `settings` (the options that must match, as one
// line), and copy rank 0's values to the others when `broadcast`. `invalid`: this rank's failure
// to validate its own arguments, reported on every rank like any other. `who` starts the errors.
void make_replicas(comm::Communicator& comm, model::ParameterSpace& space, std::exception_ptr invalid,
                   std::string_view who, const std::string& settings, bool broadcast);

// Every rank's parameter values <- root's.
void broadcast_parameters(comm::Communicator& comm, std::span<model::Parameter* const> parameters, int root = 0);

// Throws on every rank unless `value` is the same on all of them, naming `what` and the range seen
// (for example the step every rank resumed at).
void verify_same_value(comm::Communicator& comm, std::int64_t value, std::string_view what);

// The mean of one host value over the ranks (for example the loss, for a log line).
double mean_across_ranks(comm::Communicator& comm, double value);

}  // namespace loom::ddp
