// ZeRO-3's gathered values: which units have their full values now, in pooled buffers. A unit's
// values are all-gathered from every rank's slice into a buffer of the pool (storage dtype, its
// unit's size) and bound to its parameters; releasing it unbinds them and returns the buffer. A
// gather may be issued ahead of its use (prefetch) and is waited for when the unit is needed; the
// statistics say how many were issued ahead and how many were already complete by then.
//
// Every rank issues the same gathers in the same order as long as every rank runs the same model
// code, which calls the same hooks: nothing here depends on timing.
#pragma once

#include <cstdint>
#include <vector>

#include "loom/comm/communicator.hpp"
#include "loom/comm/work.hpp"
#include "loom/model/parameter_space.hpp"

namespace loom::shard::detail {

struct GatherStats {
  std::int64_t gathers = 0;     // all-gathers issued
  std::int64_t prefetched = 0;  // of them, issued before their unit asked for its values
  std::int64_t ready = 0;       // of those, already complete when their unit asked
  std::int64_t waited = 0;      // uses that had to wait for (or issue) their gather
};

class GatheredUnits {
 public:
  GatheredUnits(comm::Communicator& comm, model::ParameterSpace& space);
  ~GatheredUnits();
  GatheredUnits(const GatheredUnits&) = delete;
  GatheredUnits& operator=(const GatheredUnits&) = delete;

  // Issues the unit's gather unless it is gathered or in flight.
  void prefetch(std::size_t unit, StreamRef stream);
  // The unit's values are bound when this returns (its gather issued now if it was not).
  void require(std::size_t unit, StreamRef stream);
  bool gathered(std::size_t unit) const { return state_.at(unit) != State::released; }
  // Unbinds the unit's values and returns its buffer (waiting for a gather still in flight).
  void release(std::size_t unit);
  void release_all() noexcept;

  const GatherStats& stats() const noexcept { return stats_; }
  void reset_stats() noexcept { stats_ = {}; }
  std::size_t buffers() const noexcept { return allocated_; }  // in the pool now
  std::int64_t buffer_bytes() const noexcept { return peak_bytes_; }  // the pool's peak
  std::size_t peak_live() const noexcept { return peak_live_; }  // the most bound at once

 private:
  enum class State { released, in_flight, ready };
  Tensor take_buffer(std::int64_t elements);
  void issue(std::size_t unit, StreamRef stream);

  comm::Communicator& comm_;
  model::ParameterSpace& space_;
  std::vector<State> state_;
  std::vector<bool> was_prefetched_;
  std::vector<comm::Work> work_;
  std::vector<Tensor> buffer_;  // per unit: the pool buffer its values live in
  std::vector<Tensor> free_;
  std::size_t allocated_ = 0, live_ = 0, peak_live_ = 0;
  std::int64_t bytes_ = 0, peak_bytes_ = 0;
  GatherStats stats_;
};

}  // namespace loom::shard::detail
