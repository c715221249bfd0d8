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
//
// Values are held in one of two modes. Full (DDP, ZeRO-1/2): one flat buffer of every element,
// and every parameter's value is a view of it. Sharded (ZeRO-3): only this rank's slices, packed
// unit after unit like its optimizer state (local_values()); a unit's parameters have values only
// while bind_unit_values() points them at a gathered buffer. The optimizer reads and writes
// stored_values(), which is whichever of the two the mode holds.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "loom/core/stream.hpp"
#include "loom/core/tensor.hpp"
#include "loom/model/parameter.hpp"

namespace loom::model {

// Every parameter offset and every shard boundary is a multiple of this many elements.
inline constexpr std::int64_t space_alignment_elements = 64;

// The padded size of a unit whose parameters have these element counts, laid out for `ranks`:
// each parameter rounded up to the alignment, the unit to a multiple of alignment x ranks. The
// layout rule itself, for planning a model that is never built (plan/).
std::int64_t padded_unit_elements(std::span<const std::int64_t> parameter_elements, int ranks);

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

enum class ValueMode { full, sharded };

// The layout a space is built in and what it allocates from the start, so that a model built for a
// sharded job never holds more than its share, not even while it is being built: the ranks (the
// padding), whether it stores every value or only rank `rank`'s slices (ZeRO-3), and whether the
// flat f32 gradient buffer exists (ZeRO-2/3 bind each unit's gradients to a buffer of their own).
// shard::space_layout() gives the one a ZeRO stage trains in; the default is one process.
struct SpaceLayout {
  int ranks = 1;
  int rank = 0;
  ValueMode values = ValueMode::full;
  bool grads = true;
};

class ParameterSpace {
 public:
  // Every parameter has the same device and value dtype; none appears twice; no unit is empty.
  // The current values and gradients are copied into the flat buffers (a parameter without
  // storage, a bare description, starts at zero). Built sharded from descriptions only, the space
  // allocates just this rank's slices; otherwise it stores every value first, then shards.
  explicit ParameterSpace(std::vector<UnitSpec> units, int ranks = 1);
  ParameterSpace(std::vector<UnitSpec> units, const SpaceLayout& layout);
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
  // Each unit's padded size at `ranks` ranks.
  std::vector<std::int64_t> unit_elements_at(int ranks) const;
  Device device() const noexcept { return device_; }
  DType storage() const noexcept { return storage_; }

  ValueMode value_mode() const noexcept { return mode_; }
  // The flat value buffer in full mode; undefined when sharded.
  const Tensor& values() const noexcept { return values_; }
  // What this space stores of the values: values() in full mode, this rank's packed slices
  // ([shard_elements()]) when sharded.
  const Tensor& local_values() const noexcept { return mode_ == ValueMode::full ? values_ : shard_values_; }
  // Elements [begin, end) of the space where they are stored here; when sharded they must lie
  // inside one of this rank's slices.
  Tensor stored_values(std::int64_t begin, std::int64_t end) const;
  // The values of `unit`: a view of values() in full mode; when sharded, the buffer
  // bind_unit_values() gave it (an Error if none).
  Tensor unit_values(std::size_t unit) const;
  // Slice `rank` of unit `unit` as this space stores it (sharded: only its own rank's).
  Tensor unit_slice_values(std::size_t unit, int rank) const;
  // Full -> sharded for `rank`: keeps that rank's slices (in `into`, [shard_elements()] in the
  // storage dtype, when given: allocated beforehand), frees the full buffer, and leaves every
  // parameter without a value.
  void shard_values(int rank, Tensor into = {});
  // Sharded -> full: `full` ([elements()] in the storage dtype, on the space's device) holds every
  // value, gathered by the caller; it becomes the flat buffer.
  void unshard_values(const Tensor& full);
  // The rank whose slices a sharded space holds (0 when full).
  int value_rank() const noexcept { return value_rank_; }
  // Sharded only: points the values of `unit` at buffer ([unit.elements] in the storage dtype), or
  // at nothing when it is undefined.
  void bind_unit_values(std::size_t unit, const Tensor& buffer);
  const Tensor& bound_unit_values(std::size_t unit) const { return bound_values_.at(unit); }
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
  // shard_elements(). A slice may hold only padding: its range is valid and updates nothing.
  std::vector<ShardRange> shard(int rank) const;
  std::int64_t shard_elements() const noexcept { return elements_ / ranks_; }
  // Every unit entire, local offset = global offset (an unsharded optimizer's view).
  std::vector<ShardRange> whole() const;

  // Sets every parameter whose Init is not `keep` from (seed, its name, element index) (init.hpp),
  // writing only what this space stores: in sharded mode a rank makes exactly its slices, the same
  // bits one process makes for the whole tensor. Padding stays zero.
  void initialize(std::uint64_t seed);
  // Sets slot `slot`'s parameter from `whole`, the entire tensor it is a part of (its partition's
  // global shape; any device; f32, f16 or bf16, rounded to the storage dtype as cast() rounds),
  // writing only what this space stores: the parameter's boxes of it (tensor parallelism), all of
  // them or their overlap with this rank's slice (sharded). Weights read from a file take this way
  // in (checkpoints, convert/); set_value_origin() should then say where they came from.
  void assign(std::size_t slot, const Tensor& whole);
  // Where the values came from, in words: "initialised from seed N" after initialize(), or what a
  // data-parallel engine recorded ("broadcast from rank 0"); empty when unknown. Ranks that each
  // hold only their own slices must have the same origin: no broadcast could make them agree.
  const std::string& value_origin() const noexcept { return value_origin_; }
  void set_value_origin(std::string origin) { value_origin_ = std::move(origin); }

  // The layout in words (units, their parameters and shapes, the ranks), to compare across ranks.
  std::string describe() const;

  // Sharded values need the one engine that gathers them: it claims the space for its lifetime
  // (`who` names it), and a second claim is refused by name until end_claim().
  void claim(const std::string& who);
  void end_claim() noexcept { claimed_by_.clear(); }
  const std::string& claimed_by() const noexcept { return claimed_by_; }

 private:
  // The elements of a slot this space stores: all of it, or its overlap with this rank's slice
  // (sharded); begin >= end when it stores none.
  std::pair<std::int64_t, std::int64_t> stored_range(const Slot& slot) const;
  void lay_out(int ranks);
  void rebind(const Tensor& values, const Tensor& grads);

  std::vector<Unit> units_;
  std::vector<Slot> slots_;
  int ranks_ = 1;
  std::uint64_t layout_version_ = 0;
  std::int64_t elements_ = 0;
  Device device_ = Device::cpu();
  DType storage_ = DType::f32;
  ValueMode mode_ = ValueMode::full;
  int value_rank_ = 0;
  Tensor values_, grads_;
  Tensor shard_values_;              // sharded mode: this rank's slices, packed
  std::vector<Tensor> bound_;        // per unit, while the gradients are released
  std::vector<Tensor> bound_values_; // per unit, sharded mode: its gathered values
  std::string claimed_by_;
  std::string value_origin_;
};

}  // namespace loom::model
