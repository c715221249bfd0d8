#include "src/io/checkpoint_manifest.hpp"

#include <cmath>
#include <cstdio>
#include <iterator>
#include <limits>
#include <vector>

#include "loom/core/error.hpp"
#include "loom/io/files.hpp"

namespace loom::io::detail {

namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& state_path, const std::string& what) {
  fail(ErrorCategory::corrupt_data, "checkpoint state '", state_path, "' ", what);
}

const json& field(const json& object, const char* name, const std::string& state_path) {
  if (!object.is_object() || !object.contains(name)) bad(state_path, std::string("lacks the field '") + name + "'");
  return object.at(name);
}

std::int64_t count_field(const json& object, const char* name, const std::string& state_path) {
  const json& value = field(object, name, state_path);
  if (!value.is_number_integer() || value.get<std::int64_t>() < 0) {
    bad(state_path, std::string("has '") + name + "' = " + value.dump() + ", not a count (an integer >= 0)");
  }
  return value.get<std::int64_t>();
}

std::string text_field(const json& object, const char* name, const std::string& state_path) {
  const json& value = field(object, name, state_path);
  if (!value.is_string()) bad(state_path, std::string("has '") + name + "' = " + value.dump() + ", not a string");
  return value.get<std::string>();
}

}  // namespace

CheckpointManifest read_manifest(const std::string& dir) {
  const std::string state_path = dir + "/state.json";
  // One open judges and reads it: what decides the data files' kind is what was read.
  PlaintextReader file(state_path);
  if (!file.encrypted()) require_plain_allowed(state_path, "checkpoint file");
  CheckpointManifest manifest = parse_manifest(file.read_all(), state_path);
  manifest.encrypted = file.encrypted();
  return manifest;
}

std::string rank_file_name(int rank) {
  char name[40];
  std::snprintf(name, sizeof(name), "rank_%05d.safetensors", rank);
  return name;
}

CheckpointManifest parse_manifest(std::string_view text, const std::string& state_path) {
  json manifest;
  try {
    manifest = json::parse(text);
  } catch (const json::exception& e) {
    bad(state_path, std::string("is not valid JSON (") + e.what() + ")");
  }
  if (!manifest.is_object() || !manifest.contains("format") ||
      (manifest["format"] != checkpoint_format && manifest["format"] != sharded_checkpoint_format)) {
    bad(state_path, std::string("is not a ") + checkpoint_format + " or " + sharded_checkpoint_format + " checkpoint");
  }
  CheckpointManifest m;
  m.version = manifest["format"] == checkpoint_format ? 1 : 2;
  if (m.version == 2) {
    const std::int64_t world = count_field(manifest, "world", state_path);
    if (world < 1 || world > 1 << 20) bad(state_path, "has 'world' = " + std::to_string(world) + ", not 1 .. 2^20");
    m.world = static_cast<int>(world);
  }
  m.architecture = manifest.contains("architecture") ? text_field(manifest, "architecture", state_path) : "gpt";
  m.config = field(manifest, "config", state_path);
  if (!m.config.is_object()) bad(state_path, "has a 'config' that is not an object");
  m.precision = text_field(manifest, "precision", state_path);
  m.optimizer = text_field(manifest, "optimizer", state_path);
  m.optimizer_steps = count_field(manifest, "optimizer_steps", state_path);
  TrainingProgress& p = m.progress;
  p.step = count_field(manifest, "step", state_path);
  if (manifest.contains("batches_consumed")) {
    p.batches_consumed = count_field(manifest, "batches_consumed", state_path);
  } else {  // written before ZeRO: each rank's position in a stream partitioned over data_ranks ranks
    const std::int64_t position = count_field(manifest, "data_position", state_path);
    const std::int64_t ranks = manifest.contains("data_ranks") ? count_field(manifest, "data_ranks", state_path) : 1;
    if (ranks < 1 || position > std::numeric_limits<std::int64_t>::max() / ranks) {
      bad(state_path, "has data_position x data_ranks out of range");
    }
    p.batches_consumed = position * ranks;
  }
  const json& seed = field(manifest, "data_seed", state_path);
  if (!seed.is_number_unsigned() && !(seed.is_number_integer() && seed.get<std::int64_t>() >= 0)) {
    bad(state_path, "has 'data_seed' = " + seed.dump() + ", not an unsigned integer");
  }
  p.data_seed = seed.get<std::uint64_t>();
  const json& scaler = field(manifest, "loss_scaler", state_path);
  const json& scale = field(scaler, "scale", state_path);
  if (!scale.is_number() || !(scale.get<double>() > 0) || !std::isfinite(scale.get<double>()) ||
      scale.get<double>() > std::numeric_limits<float>::max()) {
    bad(state_path, "has loss_scaler.scale = " + scale.dump() + ", not a positive finite number");
  }
  p.loss_scale = scale.get<float>();
  p.loss_scale_clean_steps = count_field(scaler, "clean_steps", state_path);
  p.skipped_steps = count_field(scaler, "skipped_steps", state_path);
  const json& files = field(manifest, "files", state_path);
  std::vector<std::string> names(std::begin(checkpoint_data_files), std::end(checkpoint_data_files));
  if (m.version == 2) {
    names.clear();
    for (int r = 0; r < m.world; ++r) names.push_back(rank_file_name(r));
    if (!files.is_object() || files.size() != names.size()) {
      bad(state_path, "lists " + std::to_string(files.is_object() ? files.size() : 0) + " files for a world of " +
                          std::to_string(m.world) + " ranks");
    }
  }
  for (const std::string& file_name : names) {
    const char* name = file_name.c_str();
    const json& entry = field(files, name, state_path);
    const std::int64_t bytes = count_field(entry, "bytes", state_path);
    const std::int64_t crc = count_field(entry, "crc32", state_path);
    if (crc > 0xffffffffLL) bad(state_path, std::string("has a crc32 of ") + name + " beyond 32 bits");
    m.files[name] = {static_cast<std::uint64_t>(bytes), static_cast<std::uint32_t>(crc)};
  }
  if (m.version == 2) {
    const json& tensors = field(manifest, "tensors", state_path);
    for (const auto& [list, out] : {std::pair<const char*, std::vector<std::string>*>{"model", &m.model_tensors},
                                    {"optimizer", &m.optimizer_tensors}}) {
      const json& listed = field(tensors, list, state_path);
      if (!listed.is_array()) bad(state_path, std::string("has tensors.") + list + " that is not a list");
      for (const json& name : listed) {
        if (!name.is_string()) bad(state_path, std::string("has a name in tensors.") + list + " that is not a string");
        out->push_back(name.get<std::string>());
      }
    }
  }
  return m;
}

}  // namespace loom::io::detail
