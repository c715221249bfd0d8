// A CUDA grid has at most 65535 blocks in y and z (2^31 - 1 in x). A kernel that tiles rows along y
// is launched in parts of at most that many blocks, each told the index of its first row tile.
// Host-compiler safe; tests/unit/kernels/cuda/test_grid_split.cpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace loom::kernels::cuda {

inline constexpr std::int64_t max_grid_y = 65535;

struct GridPart {
  std::int64_t first, count;  // blocks [first, first + count) of the whole
};

// Consecutive parts of at most `limit` blocks covering [0, blocks); none for zero blocks.
inline std::vector<GridPart> split_grid(std::int64_t blocks, std::int64_t limit = max_grid_y) {
  std::vector<GridPart> parts;
  for (std::int64_t first = 0; first < blocks; first += limit) parts.push_back({first, std::min(limit, blocks - first)});
  return parts;
}

}  // namespace loom::kernels::cuda
