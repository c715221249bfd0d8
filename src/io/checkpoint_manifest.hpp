// A checkpoint's state.json, parsed and checked as a whole before anything else is read or
// changed: every missing, mistyped or out-of-range field is a corrupt_data Error naming the file
// and the field. (Separate from checkpoint.cpp so that it can be fuzzed on its own: fuzz/.)
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "loom/io/at_rest.hpp"
#include "loom/io/checkpoint.hpp"
#include "loom/io/safetensors.hpp"

namespace loom::io::detail {

// loom-checkpoint-1: the whole model and optimizer state in two files (consolidated).
// loom-checkpoint-2: one piece file per rank of the job that wrote it (io/piece_file.hpp).
inline constexpr const char* checkpoint_format = "loom-checkpoint-1";
inline constexpr const char* sharded_checkpoint_format = "loom-checkpoint-2";
inline constexpr const char* checkpoint_data_files[] = {"model.safetensors", "optimizer.safetensors"};
// A sharded checkpoint's file of rank r: "rank_00003.safetensors".
std::string rank_file_name(int rank);

struct CheckpointManifest {
  int version = 1;           // 1: consolidated; 2: sharded
  int world = 1;             // version 2: the ranks that wrote it, one file each
  std::string architecture;  // "gpt" when absent (written before other models)
  nlohmann::json config;     // an object: the architecture's sizes
  std::string precision, optimizer;
  std::int64_t optimizer_steps = 0;
  TrainingProgress progress;
  struct File {
    std::uint64_t bytes = 0;
    std::uint32_t crc32 = 0;
  };
  std::map<std::string, File> files;  // each of checkpoint_data_files, or each rank's file
  // Version 2: the stored tensors that are the model's values, and the optimizer's state, in order.
  std::vector<std::string> model_tensors, optimizer_tensors;
  // Whether state.json was encrypted (io/at_rest.hpp): then every data file must be, and a plain
  // one is refused by name.
  bool encrypted = false;
  Expect data_files() const { return encrypted ? Expect::encrypted : Expect::plain; }
};

CheckpointManifest parse_manifest(std::string_view text, const std::string& state_path);
// parse_manifest of a checkpoint directory's state.json, decrypted when it is encrypted.
CheckpointManifest read_manifest(const std::string& dir);

// A consolidated checkpoint's data file `file` (one of checkpoint_data_files), read once, its size
// and CRC-32 checked against the manifest on the bytes that are then parsed (src/io/checkpoint.cpp).
SafetensorsContents read_verified_file(const std::string& dir, const CheckpointManifest& manifest, const char* file);

}  // namespace loom::io::detail
