#include "loom/core/process.hpp"

#include <charconv>
#include <cstdlib>
#include <cstring>

namespace loom {

namespace {
std::optional<int> parse_rank(const char* text) {
  if (text == nullptr || *text == '\0') return std::nullopt;
  int value = -1;
  const char* end = text + std::strlen(text);
  const auto [ptr, ec] = std::from_chars(text, end, value);
  if (ec != std::errc() || ptr != end || value < 0) return std::nullopt;
  return value;
}
}  // namespace

std::optional<int> launcher_rank() noexcept {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID", "RANK"}) {
    if (auto rank = parse_rank(std::getenv(name))) return rank;
  }
  return std::nullopt;
}

}  // namespace loom
