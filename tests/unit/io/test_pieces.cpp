// io::Piece arithmetic against crafted 2-D layouts: row and column splits, the three row blocks a
// tensor-parallel rank holds of a fused QKV weight, ZeRO ranges inside those boxes; resharding by
// overlap() reproduces every element (checked against values enumerated here from coordinates),
// and check_cover names a gap or a double cover by element and coordinates.
#include <catch2/catch.hpp>

#include <limits>
#include <numeric>
#include <vector>

#include "loom/core/error.hpp"
#include "loom/io/pieces.hpp"

using loom::Shape;
using loom::io::Copy;
using loom::io::Piece;
using loom::io::Run;

namespace {

// The global indices of a piece's elements, by enumerating the box's coordinates row-major.
std::vector<std::int64_t> elements(const Piece& p) {
  std::vector<std::int64_t> out;
  const std::int64_t rows = p.box[0], cols = p.box[1];
  std::int64_t k = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c, ++k) {
      if (k >= p.begin && k < p.end) out.push_back((p.offset[0] + r) * p.global[1] + p.offset[1] + c);
    }
  }
  return out;
}

std::vector<std::int64_t> from_runs(const std::vector<Run>& runs) {
  std::vector<std::int64_t> out;
  for (const Run& run : runs) {
    for (std::int64_t i = run.begin; i < run.end; ++i) out.push_back(i);
  }
  return out;
}

Piece piece(const Shape& global, std::int64_t r0, std::int64_t c0, std::int64_t rows, std::int64_t cols,
            std::int64_t begin = 0, std::int64_t end = -1) {
  return {"w", global, {r0, c0}, Shape{rows, cols}, begin, end < 0 ? rows * cols : end};
}

// A layout: each of `boxes` split into `zero` flat ranges as ZeRO splits them (equal, last short).
std::vector<Piece> layout(const std::vector<Piece>& boxes, std::int64_t zero) {
  std::vector<Piece> out;
  for (const Piece& box : boxes) {
    const std::int64_t n = box.box.numel(), slice = (n + zero - 1) / zero;
    for (std::int64_t z = 0; z < zero; ++z) {
      Piece p = box;
      p.begin = std::min(n, z * slice);
      p.end = std::min(n, (z + 1) * slice);
      out.push_back(p);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("a piece's global runs are its box's rows, merged where they continue each other", "[io][pieces]") {
  const Shape g{6, 4};
  CHECK(loom::io::global_runs(piece(g, 2, 0, 3, 4)) == std::vector<Run>{{8, 20}});               // row block
  CHECK(loom::io::global_runs(piece(g, 0, 2, 6, 2)) ==
        std::vector<Run>{{2, 4}, {6, 8}, {10, 12}, {14, 16}, {18, 20}, {22, 24}});               // column block
  CHECK(loom::io::global_runs(piece(g, 1, 1, 2, 3, 2, 5)) == std::vector<Run>{{7, 8}, {9, 11}});  // partial rows
  CHECK(loom::io::global_runs(piece(g, 0, 0, 6, 4, 5, 5)).empty());
  for (const Piece& p : layout({piece(g, 0, 1, 6, 3), piece(g, 3, 0, 3, 4)}, 4)) {
    CHECK(from_runs(loom::io::global_runs(p)) == elements(p));
  }
}

TEST_CASE("a tensor-parallel rank's fused QKV shard is three row blocks that cover the weight once", "[io][pieces]") {
  // W_qkv [3C, C], C = 8, over 2 tensor ranks: rank t holds rows [t C/2, (t+1) C/2) of q, k and v.
  const std::int64_t C = 8, half = C / 2;
  const Shape g{3 * C, C};
  std::vector<Piece> all;
  for (std::int64_t t = 0; t < 2; ++t) {
    for (std::int64_t block = 0; block < 3; ++block) all.push_back(piece(g, block * C + t * half, 0, half, C));
  }
  CHECK(loom::io::global_runs(all[1]) == std::vector<Run>{{C * C, C * C + half * C}});  // rank 0's k rows
  REQUIRE_NOTHROW(loom::io::check_cover(all));
  // ZeRO-2 over 3 data ranks inside each block: still covered once.
  REQUIRE_NOTHROW(loom::io::check_cover(layout(all, 3)));
}

TEST_CASE("resharding by overlap copies every element from a column-split ZeRO layout into a row-split one", "[io][pieces]") {
  const Shape g{9, 10};
  std::vector<float> tensor(static_cast<std::size_t>(g.numel()));
  std::iota(tensor.begin(), tensor.end(), 0.0f);
  // Saved: 2 column blocks (6 and 4 wide), each ZeRO-sharded over 3 ranks.
  const std::vector<Piece> saved = layout({piece(g, 0, 0, 9, 6), piece(g, 0, 6, 9, 4)}, 3);
  REQUIRE_NOTHROW(loom::io::check_cover(saved));
  std::vector<std::vector<float>> stored;
  for (const Piece& p : saved) {
    std::vector<float> data;
    for (const std::int64_t i : elements(p)) data.push_back(tensor[static_cast<std::size_t>(i)]);
    stored.push_back(data);
  }
  // Loaded: 3 row blocks, each split over 2 ranks, and the whole tensor (one process).
  std::vector<Piece> wanted = layout({piece(g, 0, 0, 3, 10), piece(g, 3, 0, 3, 10), piece(g, 6, 0, 3, 10)}, 2);
  wanted.push_back(piece(g, 0, 0, 9, 10));
  for (const Piece& want : wanted) {
    std::vector<float> data(static_cast<std::size_t>(want.numel()), -1.0f);
    std::int64_t copied = 0;
    for (std::size_t s = 0; s < saved.size(); ++s) {
      for (const Copy& c : loom::io::overlap(saved[s], want)) {
        for (std::int64_t k = 0; k < c.count; ++k) {
          data[static_cast<std::size_t>(c.to + k)] = stored[s][static_cast<std::size_t>(c.from + k)];
        }
        copied += c.count;
      }
    }
    CHECK(copied == want.numel());
    std::vector<float> expected;
    for (const std::int64_t i : elements(want)) expected.push_back(tensor[static_cast<std::size_t>(i)]);
    CHECK(data == expected);
  }
}

TEST_CASE("check_cover names a gap or a double cover by element and coordinates", "[io][pieces]") {
  const Shape g{4, 5};
  std::vector<Piece> pieces = layout({piece(g, 0, 0, 4, 5)}, 3);  // [0, 7) [7, 14) [14, 20)
  pieces.erase(pieces.begin() + 1);
  CHECK_THROWS_WITH(loom::io::check_cover(pieces), Catch::Contains("leave element 7 (1, 2) uncovered"));
  pieces = layout({piece(g, 0, 0, 4, 5)}, 3);
  pieces.pop_back();
  CHECK_THROWS_WITH(loom::io::check_cover(pieces), Catch::Contains("leave element 14 (2, 4) uncovered (after piece 1)"));
  pieces = layout({piece(g, 0, 0, 4, 5)}, 3);
  pieces.push_back(piece(g, 2, 3, 1, 2));
  CHECK_THROWS_WITH(loom::io::check_cover(pieces), Catch::Contains("cover element 13 (2, 3) twice"));
  CHECK_THROWS_WITH(loom::io::global_runs(piece(g, 3, 0, 2, 5)), Catch::Contains("does not fit the global shape"));
  // An offset a hostile file could give, where offset + box would overflow.
  const Piece far{"w", Shape{1}, {std::numeric_limits<std::int64_t>::max()}, Shape{1}, 0, 1};
  CHECK_THROWS_WITH(loom::io::global_runs(far), Catch::Contains("does not fit the global shape"));
  CHECK_THROWS_WITH(loom::io::global_runs(piece(g, 0, 0, 2, 5, 3, 11)), Catch::Contains("the range [3, 11) is not inside"));
  const Piece other{"b", g, {0, 0}, Shape{4, 5}, 0, 20};
  CHECK_THROWS_WITH(loom::io::overlap(other, piece(g, 0, 0, 4, 5)), Catch::Contains("are not pieces of one tensor"));
}

TEST_CASE("a split fused weight's range becomes one piece per stacked part it meets", "[io][pieces]") {
  // Rank 1 of 2 holds rows [2, 4) of each of q, k and v in a [12, 5] QKV weight: local [6, 5].
  const loom::model::Partition qkv{Shape{12, 5}, {2, 0}, false, 3};
  const std::vector<Piece> pieces = loom::io::pieces_of("w", qkv, Shape{6, 5}, 3, 27);
  REQUIRE(pieces.size() == 3);
  std::vector<std::int64_t> got;
  for (const Piece& p : pieces) {
    CHECK(p.box == Shape{2, 5});
    for (const std::int64_t e : elements(p)) got.push_back(e);
  }
  CHECK(pieces[0].offset == std::vector<std::int64_t>{2, 0});
  CHECK(pieces[1].offset == std::vector<std::int64_t>{6, 0});
  CHECK(pieces[2].offset == std::vector<std::int64_t>{10, 0});
  // Local elements 3 .. 26 are rows 2-3 of q from column 3, rows 6-7 (k), rows 10-11 of v to column 1.
  std::vector<std::int64_t> want;
  for (std::int64_t local = 3; local < 27; ++local) {
    const std::int64_t row = local / 5, part = row / 2;
    want.push_back((part * 4 + 2 + row % 2) * 5 + local % 5);
  }
  CHECK(got == want);
  // An empty range is one empty piece; a whole (unsplit) parameter is one piece.
  CHECK(loom::io::pieces_of("w", qkv, Shape{6, 5}, 0, 0).size() == 1);
  const loom::model::Partition whole{Shape{12, 5}, {0, 0}, true, 3};
  CHECK(loom::io::pieces_of("w", whole, Shape{12, 5}, 0, 60).size() == 1);
}
