#include "loom/io/checkpoint.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <span>
#include <vector>

#include "loom/comm/agreement.hpp"
#include "loom/core/error.hpp"
#include "loom/core/tensor_ops.hpp"
#include "loom/io/at_rest.hpp"
#include "loom/io/files.hpp"
#include "loom/io/safetensors.hpp"
#include "loom/optim/state_io.hpp"
#include "src/io/checkpoint_commit.hpp"
#include "src/io/checkpoint_manifest.hpp"
#include "src/io/sharded_checkpoint.hpp"

namespace loom::io {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using detail::checkpoint_format;
using detail::config_json;
using detail::step_name;
constexpr const auto& data_files = detail::checkpoint_data_files;

void require_matching_config(const detail::CheckpointManifest& manifest, const model::Model& model,
                             const std::string& where) {
  require(manifest.architecture == model.architecture_name(), "checkpoint '", where, "' holds a ",
          manifest.architecture, " model but the run trains a ", model.architecture_name());
  const json& saved = manifest.config;
  const json mine = config_json(model);
  for (const auto& [field, value] : mine.items()) {
    if (!saved.contains(field) || saved[field] != value) {
      fail(ErrorCategory::invalid_argument, "checkpoint '", where, "' has ", field, " = ",
           saved.contains(field) ? saved[field].dump() : std::string("(missing)"), " but the model has ", value.dump());
    }
  }
}

struct Expected {
  std::string name;
  Shape shape;
  DType dtype;
};

// The file holds exactly the named tensors, each with its expected shape and dtype.
void require_same_tensors(const std::map<std::string, Tensor>& loaded, const std::vector<Expected>& targets,
                          const std::string& file) {
  for (const Expected& expected : targets) {
    const auto it = loaded.find(expected.name);
    if (it == loaded.end()) {
      fail(ErrorCategory::invalid_argument, "checkpoint file '", file, "' has no tensor '", expected.name,
           "' (saved with other model or optimizer settings?)");
    }
    require(it->second.shape() == expected.shape && it->second.dtype() == expected.dtype, "checkpoint tensor '",
            expected.name, "' in '", file, "' is ", it->second, " but the run expects ", expected.dtype, " ",
            expected.shape);
  }
  if (loaded.size() != targets.size()) {
    for (const auto& [name, tensor] : loaded) {
      const bool used = std::any_of(targets.begin(), targets.end(), [&](const Expected& t) { return t.name == name; });
      if (!used) {
        fail(ErrorCategory::invalid_argument, "checkpoint file '", file, "' holds tensor '", name,
             "' that this run has no place for (saved with other model or optimizer settings?)");
      }
    }
  }
}

}  // namespace

namespace {

// The model's weights by name: views of the values, or, when they are sharded (ZeRO-3), gathered
// unit by unit into host tensors on rank 0 (every rank takes part; the others get none).
std::vector<NamedTensor> gathered_weights(const model::Model& model, comm::Communicator* comm) {
  const model::ParameterSpace& space = model.parameter_space();
  std::vector<NamedTensor> weights;
  if (space.value_mode() == model::ValueMode::full) {
    for (const model::Parameter* p : space.parameters()) weights.push_back({p->name(), p->value()});
    return weights;
  }
  require(comm != nullptr && comm->size() == space.ranks(), "save_checkpoint: the values are sharded over ",
          space.ranks(), " ranks; pass their communicator");
  const bool root = comm->rank() == 0;
  std::int64_t largest = 0;
  for (const model::Unit& unit : space.units()) largest = std::max(largest, unit.elements);
  std::exception_ptr failure;
  Tensor unit_buffer;
  try {
    unit_buffer = Tensor::empty({largest}, space.storage(), space.device());
    if (root) {
      for (const model::Parameter* p : space.parameters()) weights.push_back({p->name(), Tensor::empty(p->shape(), p->dtype())});
    }
  } catch (...) {
    failure = std::current_exception();
  }
  comm::throw_if_any_failed(*comm, failure, "gathering the sharded values");
  // Every unit is gathered on every rank even after rank 0 failed to copy one: the others must not
  // be left waiting in the next gather; the failure is agreed at the end.
  for (std::size_t u = 0; u < space.units().size(); ++u) {
    const model::Unit& unit = space.units()[u];
    const Tensor full = unit_buffer.slice(0, unit.elements);
    comm->all_gather(space.unit_slice_values(u, space.value_rank()), full).wait();
    if (!root || failure) continue;
    try {
      for (const std::size_t s : unit.slots) {
        const model::Slot& slot = space.slots()[s];
        const std::int64_t at = slot.offset - unit.begin;
        copy(weights[s].tensor, full.slice(at, at + slot.numel).view(slot.parameter->shape()));
      }
    } catch (...) {
      failure = std::current_exception();
    }
  }
  comm::throw_if_any_failed(*comm, failure, "gathering the sharded values");
  return weights;
}

std::string write_consolidated(const std::string& run_dir, const model::Model& model,
                               const optim::Optimizer& optimizer, const std::vector<NamedTensor>& weights,
                               const std::vector<optim::StateTensor>& optimizer_state,
                               const TrainingProgress& progress) {
  const fs::path temporary = detail::prepare_temporary(run_dir, progress.step);
  std::vector<NamedTensor> state;
  for (const optim::StateTensor& t : optimizer_state) state.push_back({t.name, t.tensor});
  const std::string config = config_json(model).dump();
  const FileDigest digests[] = {
      write_safetensors((temporary / data_files[0]).string(), weights,
                        {{"format", "pt"}, {"loom_config", config}, {"loom_precision", model.precision().name()}}),
      write_safetensors((temporary / data_files[1]).string(), state,
                        {{"loom_optimizer", optimizer.name()}, {"optimizer_steps", std::to_string(optimizer.steps_taken())}})};
  json files = json::object();
  for (std::size_t i = 0; i < 2; ++i) files[data_files[i]] = {{"bytes", digests[i].bytes}, {"crc32", digests[i].crc32}};
  json manifest = detail::manifest_json(model, optimizer, progress);
  manifest["files"] = files;
  return detail::commit(run_dir, temporary, progress.step, manifest);
}

}  // namespace

std::string save_checkpoint(const std::string& run_dir, const model::Model& model, const optim::Optimizer& optimizer,
                            const TrainingProgress& progress, comm::Communicator* comm, CheckpointLayout layout) {
  if (layout == CheckpointLayout::sharded) {
    require(comm != nullptr || (!optimizer.sharded() && model.parameter_space().value_mode() == model::ValueMode::full),
            "save_checkpoint: the model or optimizer holds one rank's shard; pass the job's communicator (every rank)");
    return detail::write_and_commit(run_dir, detail::agreed_sharded_save(model, optimizer, progress, comm), comm);
  }
  require(comm != nullptr || !optimizer.sharded(), "save_checkpoint: the optimizer holds one rank's shard; pass the "
          "job's communicator so the state can be gathered");
  require(model.tensor_ranks() == 1, "save_checkpoint: a consolidated checkpoint of a model split over a tensor "
          "group (", model.tensor_ranks(), " ranks) is not written; save it sharded and consolidate it with loom-ckpt");
  // Every rank takes part in the gather; rank 0 writes.
  const std::vector<optim::StateTensor> state = optim::gather_state(optimizer, comm);
  const std::vector<NamedTensor> weights = gathered_weights(model, comm);
  if (comm == nullptr) return write_consolidated(run_dir, model, optimizer, weights, state, progress);
  std::exception_ptr failure;
  std::string where = (fs::path(run_dir) / step_name(progress.step)).string();
  if (comm->rank() == 0) {
    try {
      where = write_consolidated(run_dir, model, optimizer, weights, state, progress);
    } catch (...) {
      failure = std::current_exception();
    }
  }
  comm::throw_if_any_failed(*comm, failure, "saving a checkpoint");
  return where;
}

std::optional<std::string> latest_checkpoint(const std::string& run_dir) {
  const fs::path pointer = fs::path(run_dir) / "latest";
  if (!fs::exists(pointer)) return std::nullopt;
  std::string name = read_file(pointer.string());
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  if (name.empty() || name.find('/') != std::string::npos) {
    fail(ErrorCategory::corrupt_data, "'", pointer.string(), "' does not name a checkpoint");
  }
  return (fs::path(run_dir) / name).string();
}

namespace {

// A checkpoint directory's manifest and data files, each file read once and its size and CRC-32
// checked on the bytes that are then parsed. Throws a corrupt_data or io Error naming the problem.
struct VerifiedCheckpoint {
  detail::CheckpointManifest manifest;
  std::vector<SafetensorsContents> contents;  // model, optimizer
};

VerifiedCheckpoint read_verified(const std::string& dir, detail::CheckpointManifest manifest) {
  VerifiedCheckpoint v{std::move(manifest), {}};
  for (const char* file : data_files) v.contents.push_back(detail::read_verified_file(dir, v.manifest, file));
  return v;
}

}  // namespace

SafetensorsContents detail::read_verified_file(const std::string& dir, const detail::CheckpointManifest& manifest,
                                               const char* file) {
  const std::string file_path = (fs::path(dir) / file).string();
  const auto expected = manifest.files.find(file);
  require(expected != manifest.files.end(), ErrorCategory::corrupt_data, "checkpoint '", dir, "': state.json lists no ",
          file);
  const std::string bytes = read_at_rest(file_path, manifest.data_files());
  const std::uint32_t crc = crc32(std::span(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size()));
  if (bytes.size() != expected->second.bytes || crc != expected->second.crc32) {
    fail(ErrorCategory::corrupt_data, "checkpoint file '", file_path, "' is damaged: ", bytes.size(),
         " bytes with CRC-32 ", crc, ", expected ", expected->second.bytes, " bytes with CRC-32 ",
         expected->second.crc32);
  }
  return parse_safetensors(bytes, file_path);
}

std::int64_t verify_checkpoint(const std::string& dir) { return verify_checkpoint(dir, 0, 1); }

std::int64_t verify_checkpoint(const std::string& dir, int part, int parts) {
  require(parts >= 1 && part >= 0 && part < parts, "verify_checkpoint: part ", part, " of ", parts, " does not exist");
  detail::CheckpointManifest manifest = detail::read_manifest(dir);
  if (manifest.version == 2) {
    detail::verify_sharded(dir, manifest, part, parts);
    return manifest.progress.step;
  }
  if (parts == 1) return read_verified(dir, std::move(manifest)).manifest.progress.step;
  // loom-checkpoint-1 in parts: each reader checks the whole files it is given.
  for (std::size_t i = 0; i < std::size(data_files); ++i) {
    const std::string file_path = (fs::path(dir) / data_files[i]).string();
    const detail::CheckpointManifest::File& expected = manifest.files.at(data_files[i]);
    if (!fs::exists(file_path)) fail(ErrorCategory::corrupt_data, "checkpoint file '", file_path, "' is missing");
    const std::uint64_t bytes = plaintext_size(file_path, manifest.data_files());
    if (bytes != expected.bytes) {
      fail(ErrorCategory::corrupt_data, "checkpoint file '", file_path, "' is damaged: ", bytes, " bytes, expected ",
           expected.bytes);
    }
    if (static_cast<int>(i % static_cast<std::size_t>(parts)) != part) continue;
    const FileDigest d = digest_at_rest(file_path, manifest.data_files());
    if (d.crc32 != expected.crc32) {
      fail(ErrorCategory::corrupt_data, "checkpoint file '", file_path, "' is damaged: ", d.bytes, " bytes with CRC-32 ",
           d.crc32, ", expected ", expected.bytes, " bytes with CRC-32 ", expected.crc32);
    }
  }
  return manifest.progress.step;
}

std::string checkpoint_or_latest(const std::string& path) {
  if (fs::exists(fs::path(path) / "state.json")) return path;
  const std::optional<std::string> latest = latest_checkpoint(path);
  if (!latest) fail(ErrorCategory::io, "'", path, "' is neither a checkpoint (no state.json) nor a run directory with a "
                    "'latest' checkpoint");
  return *latest;
}

TrainingProgress load_checkpoint(const std::string& path, model::Model& model, optim::Optimizer& optimizer) {
  const std::string dir = checkpoint_or_latest(path);
  require_encrypted_input((fs::path(dir) / "state.json").string(), "checkpoint file");
  detail::CheckpointManifest read = detail::read_manifest(dir);
  require_matching_config(read, model, dir);
  require(read.precision == model.precision().name(), "checkpoint '", dir, "' was trained in ", read.precision,
          " but the model is ", model.precision().name());
  require(read.optimizer == optimizer.name(), "checkpoint '", dir, "' holds ", read.optimizer,
          " state but the run uses ", optimizer.name());
  if (read.version == 2) {
    detail::load_sharded(dir, read, model, optimizer);
    return read.progress;
  }
  require(model.tensor_ranks() == 1, "checkpoint '", dir, "' is consolidated (loom-checkpoint-1), which loads only "
          "into a model that is not split over a tensor group (this one is over ", model.tensor_ranks(), " ranks)");
  const VerifiedCheckpoint verified = read_verified(dir, std::move(read));
  const detail::CheckpointManifest& manifest = verified.manifest;
  const SafetensorsContents& weights = verified.contents[0];
  const SafetensorsContents& state = verified.contents[1];
  const std::vector<model::Parameter*> parameters = model.parameter_space().parameters();
  std::vector<Expected> model_targets, state_targets;
  for (const model::Parameter* p : parameters) {
    model_targets.push_back({p->name(), p->shape(), p->dtype()});
  }
  for (const auto& [name, shape] : optim::state_layout(optimizer)) state_targets.push_back({name, shape, DType::f32});
  // Everything is checked before anything is copied: a refused checkpoint leaves the run as it was.
  require_same_tensors(weights.tensors, model_targets, (fs::path(dir) / data_files[0]).string());
  require_same_tensors(state.tensors, state_targets, (fs::path(dir) / data_files[1]).string());
  model::ParameterSpace& space = model.parameter_space();
  for (std::size_t s = 0; s < space.slots().size(); ++s) {
    space.assign(s, weights.tensors.at(space.slots()[s].parameter->name()));
  }
  optim::scatter_state(optimizer, state.tensors);
  optimizer.set_steps_taken(manifest.optimizer_steps);
  return manifest.progress;
}

}  // namespace loom::io
