// kernels/cuda/grid_split.hpp: a grid dimension split into launches within CUDA's 65535-block limit.
#include <catch2/catch.hpp>

#include "kernels/cuda/grid_split.hpp"

using loom::kernels::cuda::GridPart;
using loom::kernels::cuda::max_grid_y;
using loom::kernels::cuda::split_grid;

TEST_CASE("split_grid covers every block once in parts within the limit", "[kernels][cuda]") {
  REQUIRE(split_grid(0).empty());
  REQUIRE(split_grid(1).size() == 1);
  REQUIRE(split_grid(max_grid_y).size() == 1);
  // The WMMA GEMM's row tiles of a D with M = 8,388,481 rows (128 per tile): one past the limit.
  const std::int64_t tiles = (8388481 + 127) / 128;
  REQUIRE(tiles == max_grid_y + 1);
  for (std::int64_t blocks : {tiles, std::int64_t{3} * max_grid_y + 17}) {
    const std::vector<GridPart> parts = split_grid(blocks);
    std::int64_t next = 0;
    for (const GridPart& part : parts) {
      REQUIRE(part.first == next);
      REQUIRE(part.count >= 1);
      REQUIRE(part.count <= max_grid_y);
      next += part.count;
    }
    REQUIRE(next == blocks);
  }
  REQUIRE(split_grid(10, 4).size() == 3);
  REQUIRE(split_grid(10, 4).back().count == 2);
}
