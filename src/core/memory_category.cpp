#include "loom/core/memory_category.hpp"

namespace loom {

namespace {
thread_local MemoryCategory current = MemoryCategory::other;
}  // namespace

std::string_view to_string(MemoryCategory category) noexcept {
  switch (category) {
    case MemoryCategory::other: return "other";
    case MemoryCategory::parameters: return "parameters";
    case MemoryCategory::gradients: return "gradients";
    case MemoryCategory::optimizer: return "optimizer";
    case MemoryCategory::activations: return "activations";
    case MemoryCategory::communication: return "communication";
    case MemoryCategory::workspace: return "workspace";
  }
  return "other";
}

MemoryCategory current_memory_category() noexcept { return current; }

MemoryCategoryScope::MemoryCategoryScope(MemoryCategory category) noexcept : previous_(current) { current = category; }

MemoryCategoryScope::~MemoryCategoryScope() { current = previous_; }

}  // namespace loom
