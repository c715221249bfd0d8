// The arithmetic of checkpoint pieces (issue 27's sharded format, loom-checkpoint-2). A piece is
// part of one tensor of a global shape: a box of the global tensor (what a tensor-parallel rank
// holds: a row or column block, or one of a fused QKV weight's three row blocks) and a flat range
// inside that box, in the box's row-major order (what a ZeRO rank holds of it). The same table
// describes ZeRO slices and tensor-parallel splits, so a checkpoint written in one layout loads in
// any other: a loader intersects each piece it needs with each piece stored and copies the shared
// elements.
//
// Everything reduces to runs of the global tensor's row-major order: a box's rows are contiguous
// runs, a piece's elements are ascending runs (row-major inside a box is monotone in the global
// order), and two pieces share the intersection of their runs. Pure functions of plain data; no
// I/O.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "loom/core/shape.hpp"
#include "loom/model/parameter.hpp"

namespace loom::io {

// Elements [begin, end) of a tensor in its global row-major order.
struct Run {
  std::int64_t begin = 0;
  std::int64_t end = 0;
  bool operator==(const Run&) const = default;
};

struct Piece {
  std::string tensor;                // "h0.attn.qkv.weight", "h0.attn.qkv.weight.exp_avg", ...
  Shape global;                      // the whole tensor
  std::vector<std::int64_t> offset;  // the box: its first element's coordinates in the global tensor
  Shape box;                         //          and its extent
  std::int64_t begin = 0;            // the piece: elements [begin, end) of the box, row-major
  std::int64_t end = 0;

  std::int64_t numel() const noexcept { return end - begin; }
  // The box lies inside the global shape and the range inside the box; an Error names the tensor.
  void validate() const;
};

// The pieces of a parameter holding its elements [begin, end) (a ZeRO slice, or all of it): one
// per box of its partition (model::boxes: the whole tensor unless it is split for tensor
// parallelism; three for a split fused QKV weight) that the range meets, in local order, so that
// consecutive pieces hold consecutive local elements. An empty range gives one empty piece.
std::vector<Piece> pieces_of(const std::string& tensor, const model::Partition& partition, const Shape& shape,
                             std::int64_t begin, std::int64_t end);

// The piece's elements as ascending, non-adjacent runs of the global tensor.
std::vector<Run> global_runs(const Piece& piece);

// What two pieces of one tensor share: `count` elements at position `from` of the source piece
// (its elements numbered 0 .. numel - 1 in order) and position `to` of the destination piece,
// ascending. Pieces of different tensors or global shapes are an Error.
struct Copy {
  std::int64_t from = 0;
  std::int64_t to = 0;
  std::int64_t count = 0;
  bool operator==(const Copy&) const = default;
};
std::vector<Copy> overlap(const Piece& from, const Piece& to);

// Pieces of one tensor that a checkpoint stores must cover each of its elements exactly once;
// otherwise an Error names the tensor, the first element missed or covered twice (index and
// coordinates) and the pieces involved (their positions in `pieces`).
void check_cover(std::span<const Piece> pieces);

}  // namespace loom::io
