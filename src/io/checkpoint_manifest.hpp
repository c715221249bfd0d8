// A checkpoint's state.json, parsed and checked as a whole before anything else is read or
// changed: every missing, mistyped or out-of-range field is a corrupt_data Error naming the file
// and the field. (Separate from checkpoint.cpp so that it can be fuzzed on its own: fuzz/.)
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "loom/io/checkpoint.hpp"

namespace loom::io::detail {

inline constexpr const char* checkpoint_format = "loom-checkpoint-1";
inline constexpr const char* checkpoint_data_files[] = {"model.safetensors", "optimizer.safetensors"};

struct CheckpointManifest {
  std::string architecture;  // "gpt" when absent (written before other models)
  nlohmann::json config;     // an object: the architecture's sizes
  std::string precision, optimizer;
  std::int64_t optimizer_steps = 0;
  TrainingProgress progress;
  struct File {
    std::uint64_t bytes = 0;
    std::uint32_t crc32 = 0;
  };
  std::map<std::string, File> files;  // each of checkpoint_data_files
};

CheckpointManifest parse_manifest(std::string_view text, const std::string& state_path);

}  // namespace loom::io::detail
