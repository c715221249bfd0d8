// One flat, aligned home for every parameter of a model. The space takes the model's parameters,
// grouped into units (one per transformer block, one for the embeddings and the final norm: the
// granularity at which ZeRO shards and, later, gathers), lays them out in one flat value buffer (the
// storage dtype) and one flat f32 gradient buffer, and turns every Parameter's value and gradient
// into views of them. Reducer buckets, ZeRO shards, optimizer slices and checkpoint pieces are all
// ranges of this one space.
//
// The layout depends only on the shapes and the number of ranks: units in the order given, the
// parameters of a unit in the order given, each at an offset that is a multiple of 64 elements,
// and every unit padded to a multiple of 64 x ranks elements, so that rank r owns slice r of every
// unit (shard(r)) and every slice is aligned. Padding elements are zero and stay zero.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/core/stream.hpp"
#include "loom/core/tensor.hpp"
#include "loom/model/parameter.hpp"

namespace loom::model {

// Every parameter offset and every shard boundary is a multiple of this many elements.
inline constexpr std::int64_t space_alignment_elements = 64;

struct UnitSpec {
  std::string name;
  std::vector<Parameter*> parameters;
};

struct Unit {
  std::string name;
  std::int64_t begin = 0;           // first element in the flat buffers
  std::int64_t elements = 0;        // padded: a multiple of 64 x ranks
  std::vector<std::size_t> slots;   // its parameters, as indices into ParameterSpace::slots()
};

struct Slot {
  Parameter* parameter = nullptr;
  std::int64_t offset = 0;  // first element in the flat buffers
  std::int64_t numel = 0;
  std::size_t unit = 0;
};

// A piece of a rank's part of the space: elements [begin, end), kept at `local` in buffers that
// hold only that rank's part (optimizer state, ZeRO-2 gradients) packed unit after unit.
struct ShardRange {
  std::size_t unit = 0;
  std::int64_t begin = 0, end = 0;
  std::int64_t local = 0;
  std::int64_t elements() const noexcept { return end - begin; }
};

class ParameterSpace {
 public:
  // Every parameter has the same device and value dtype; none appears twice; no unit is empty.
  // The current values and gradients are copied into the flat buffers.
  explicit ParameterSpace(std::vector<UnitSpec> units, int ranks = 1);
  ParameterSpace(const ParameterSpace&) = delete;
  ParameterSpace& operator=(const ParameterSpace&) = delete;

  // Lays the space out again for another number of ranks (the padding changes); values and
  // gradients (where allocated) are kept.
  void repartition(int ranks);
  int ranks() const noexcept { return ranks_; }
  // Changes with every new layout (views and ranges taken before it are stale).
  std::uint64_t layout_version() const noexcept { return layout_version_; }

  const std::vector<Unit>& units() const noexcept { return units_; }
  const std::vector<Slot>& slots() const noexcept { return slots_; }
  std::vector<Parameter*> parameters() const;  // in space order
  std::int64_t elements() const noexcept { return elements_; }    // padding included
  std::int64_t parameter_elements() const noexcept;               // without the padding
  // The padded size the space would have at `ranks` ranks (nothing is changed).
  std::int64_t elements_at(int ranks) const;
  Device device() const noexcept { return values_.device(); }
  DType storage() const noexcept { return values_.dtype(); }

  const Tensor& values() const noexcept { return values_; }
  Tensor unit_values(std::size_t unit) const;
  // The flat gradient buffer; undefined after release_grads().
  const Tensor& grads() const noexcept { return grads_; }
  Tensor unit_grads(std::size_t unit) const;
  bool grads_allocated() const noexcept { return grads_.defined(); }
  // Frees the flat gradient buffer: each unit's gradients then live only where bind_unit_grads()
  // puts them (ZeRO-2). allocate_grads() brings a zeroed flat buffer back.
  void release_grads();
  void allocate_grads();
  // Points the gradients of `unit` at buffer ([unit.elements] f32 on the space's device; its
  // padding should be zero), or at nothing when buffer is undefined. Needs released gradients.
  void bind_unit_grads(std::size_t unit, const Tensor& buffer);
  // What bind_unit_grads() last gave `unit` (undefined: nothing, or gradients not released).
  const Tensor& bound_unit_grads(std::size_t unit) const { return bound_.at(unit); }
  void zero_grads(StreamRef stream = {});  // every gradient storage there is

  // Slice `rank` of every unit (ranks() slices each), packed: local offsets run from 0 to
  // shard_elements().
  std::vector<ShardRange> shard(int rank) const;
  std::int64_t shard_elements() const noexcept { return elements_ / ranks_; }
  // Every unit entire, local offset = global offset (an unsharded optimizer's view).
  std::vector<ShardRange> whole() const;

  // The layout in words (units, their parameters and shapes, the ranks), to compare across ranks.
  std::string describe() const;

 private:
  void lay_out(int ranks);
  void rebind(const Tensor& values, const Tensor& grads);

  std::vector<Unit> units_;
  std::vector<Slot> slots_;
  int ranks_ = 1;
  std::uint64_t layout_version_ = 0;
  std::int64_t elements_ = 0;
  Tensor values_, grads_;
  std::vector<Tensor> bound_;  // per unit, while the gradients are released
};

}  // namespace loom::model
