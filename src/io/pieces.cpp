#include "loom/io/pieces.hpp"

#include <algorithm>
#include <sstream>

#include "loom/core/error.hpp"

namespace loom::io {

namespace {

// "(2, 5)": the coordinates of global element `index`.
std::string coordinates(const Shape& shape, std::int64_t index) {
  std::vector<std::int64_t> c(static_cast<std::size_t>(shape.rank()));
  for (std::int64_t d = shape.rank() - 1; d >= 0; --d) {
    c[static_cast<std::size_t>(d)] = index % shape[d];
    index /= shape[d];
  }
  std::ostringstream out;
  out << "(";
  for (std::size_t d = 0; d < c.size(); ++d) out << (d > 0 ? ", " : "") << c[d];
  out << ")";
  return out.str();
}

}  // namespace

void Piece::validate() const {
  const std::int64_t rank = global.rank();
  require(box.rank() == rank && static_cast<std::int64_t>(offset.size()) == rank, "checkpoint piece of '", tensor,
          "': the box ", box, " and its ", offset.size(), " offset(s) must have the rank of the global shape ", global);
  for (std::int64_t d = 0; d < rank; ++d) {
    const std::int64_t at = offset[static_cast<std::size_t>(d)];
    // (at + box > global written so that a hostile offset cannot overflow)
    require(at >= 0 && box[d] >= 0 && box[d] <= global[d] && at <= global[d] - box[d], "checkpoint piece of '", tensor,
            "': the box ", box, " at offset ", at, " in dimension ", d, " does not fit the global shape ", global);
  }
  require(begin >= 0 && begin <= end && end <= box.numel(), "checkpoint piece of '", tensor, "': the range [", begin,
          ", ", end, ") is not inside its box of ", box.numel(), " elements");
}

std::vector<Piece> pieces_of(const std::string& tensor, const model::Partition& partition, const Shape& shape,
                             std::int64_t begin, std::int64_t end) {
  const std::vector<model::Box> boxes = model::boxes(partition, shape);
  std::vector<Piece> pieces;
  for (const model::Box& box : boxes) {
    const std::int64_t from = std::max(begin, box.first), to = std::min(end, box.first + box.extent.numel());
    if (from >= to) continue;
    pieces.push_back({tensor, partition.global, box.offset, box.extent, from - box.first, to - box.first});
    pieces.back().validate();
  }
  if (pieces.empty()) {
    pieces.push_back({tensor, partition.global, boxes.front().offset, boxes.front().extent, 0, 0});
    pieces.back().validate();
  }
  return pieces;
}

std::vector<Run> global_runs(const Piece& piece) {
  piece.validate();
  std::vector<Run> runs;
  if (piece.numel() == 0) return runs;
  const std::int64_t rank = piece.global.rank();
  if (rank == 0) return {{0, 1}};
  // The box is rows of its last extent; each row is contiguous in the global tensor.
  const std::int64_t width = piece.box[rank - 1];
  std::vector<std::int64_t> strides(static_cast<std::size_t>(rank), 1);  // the global tensor's
  for (std::int64_t d = rank - 2; d >= 0; --d) {
    strides[static_cast<std::size_t>(d)] = strides[static_cast<std::size_t>(d + 1)] * piece.global[d + 1];
  }
  for (std::int64_t row = piece.begin / width; row * width < piece.end; ++row) {
    std::int64_t start = piece.offset[static_cast<std::size_t>(rank - 1)];  // the row's first global index
    for (std::int64_t d = rank - 2, r = row; d >= 0; --d) {
      start += (piece.offset[static_cast<std::size_t>(d)] + r % piece.box[d]) * strides[static_cast<std::size_t>(d)];
      r /= piece.box[d];
    }
    const std::int64_t first = std::max(piece.begin, row * width), last = std::min(piece.end, (row + 1) * width);
    const Run run{start + first - row * width, start + last - row * width};
    if (!runs.empty() && runs.back().end == run.begin) {
      runs.back().end = run.end;  // full-width rows continue each other
    } else {
      runs.push_back(run);
    }
  }
  return runs;
}

std::vector<Copy> overlap(const Piece& from, const Piece& to) {
  require(from.tensor == to.tensor && from.global == to.global, "checkpoint pieces: '", from.tensor, "' ", from.global,
          " and '", to.tensor, "' ", to.global, " are not pieces of one tensor");
  const std::vector<Run> a = global_runs(from), b = global_runs(to);
  std::vector<Copy> copies;
  std::size_t i = 0, j = 0;
  std::int64_t at_a = 0, at_b = 0;  // positions of runs a[i] and b[j] in their pieces
  while (i < a.size() && j < b.size()) {
    const std::int64_t begin = std::max(a[i].begin, b[j].begin), end = std::min(a[i].end, b[j].end);
    if (begin < end) {
      const Copy copy{at_a + begin - a[i].begin, at_b + begin - b[j].begin, end - begin};
      if (!copies.empty() && copies.back().from + copies.back().count == copy.from &&
          copies.back().to + copies.back().count == copy.to) {
        copies.back().count += copy.count;
      } else {
        copies.push_back(copy);
      }
    }
    if (a[i].end <= b[j].end) {
      at_a += a[i].end - a[i].begin;
      ++i;
    } else {
      at_b += b[j].end - b[j].begin;
      ++j;
    }
  }
  return copies;
}

void check_cover(std::span<const Piece> pieces) {
  require(!pieces.empty(), "checkpoint pieces: no pieces to check");
  const Piece& first = pieces.front();
  struct Owned {
    Run run;
    std::size_t piece;
  };
  std::vector<Owned> runs;
  for (std::size_t p = 0; p < pieces.size(); ++p) {
    require(pieces[p].tensor == first.tensor && pieces[p].global == first.global, "checkpoint pieces: piece ", p, " is '",
            pieces[p].tensor, "' ", pieces[p].global, ", not a piece of '", first.tensor, "' ", first.global);
    for (const Run& run : global_runs(pieces[p])) runs.push_back({run, p});
  }
  std::sort(runs.begin(), runs.end(), [](const Owned& x, const Owned& y) { return x.run.begin < y.run.begin; });
  std::int64_t covered = 0;  // every element below is covered once
  std::size_t last_piece = 0;
  for (const Owned& owned : runs) {
    if (owned.run.begin > covered) {
      fail(ErrorCategory::corrupt_data, "checkpoint pieces of '", first.tensor, "' ", first.global, " leave element ",
           covered, " ", coordinates(first.global, covered), " uncovered (between pieces ", last_piece, " and ",
           owned.piece, ")");
    }
    if (owned.run.begin < covered) {
      fail(ErrorCategory::corrupt_data, "checkpoint pieces of '", first.tensor, "' ", first.global, " cover element ",
           owned.run.begin, " ", coordinates(first.global, owned.run.begin), " twice (pieces ", last_piece, " and ",
           owned.piece, ")");
    }
    covered = owned.run.end;
    last_piece = owned.piece;
  }
  if (covered < first.global.numel()) {
    fail(ErrorCategory::corrupt_data, "checkpoint pieces of '", first.tensor, "' ", first.global, " leave element ",
         covered, " ", coordinates(first.global, covered), " uncovered (after piece ", last_piece, ")");
  }
}

}  // namespace loom::io
