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
#include "loom/io/files.hpp"
#include "loom/io/safetensors.hpp"
#include "loom/optim/state_io.hpp"
#include "src/io/checkpoint_manifest.hpp"
#include "src/io/sharded_checkpoint.hpp"

namespace loom::io {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using detail::checkpoint_format;
constexpr const auto& data_files = detail::checkpoint_data_files;

json config_json(const model::Model& model) {
  json config = json::object();
  for (const auto& [field, value] : model.architecture()) config[field] = value;
  return config;
}

std::string step_name(std::int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step_%08lld", static_cast<long long>(step));
  return name;
}

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

// Copies a loaded tensor into what the space stores of its slot (all of it, or this rank's part).
void load_value(const model::ParameterSpace& space, std::size_t slot_index, const Tensor& loaded) {
  const model::Slot& slot = space.slots()[slot_index];
  if (space.value_mode() == model::ValueMode::full) {
    copy(slot.parameter->value(), loaded);
    return;
  }
  const model::Unit& unit = space.units()[slot.unit];
  const std::int64_t size = unit.elements / space.ranks();
  const std::int64_t first = unit.begin + space.value_rank() * size;
  const std::int64_t begin = std::max(first, slot.offset), end = std::min(first + size, slot.offset + slot.numel);
  if (begin >= end) return;
  copy(space.stored_values(begin, end), loaded.flatten().slice(begin - slot.offset, end - slot.offset));
}

json manifest_json(const model::Model& model, const optim::Optimizer& optimizer, const TrainingProgress& progress) {
  return {{"format", checkpoint_format},
          {"step", progress.step},
          {"optimizer", optimizer.name()},
          {"optimizer_steps", optimizer.steps_taken()},
          {"batches_consumed", progress.batches_consumed},
          {"data_seed", progress.data_seed},
          {"loss_scaler",
           {{"scale", progress.loss_scale},
            {"clean_steps", progress.loss_scale_clean_steps},
            {"skipped_steps", progress.skipped_steps}}},
          {"architecture", model.architecture_name()},
          {"config", config_json(model)},
          {"precision", model.precision().name()}};
}

// <run>/.step_<N>.tmp (appended piece by piece: GCC 12 warns falsely about "." + a temporary).
fs::path temporary_dir(const std::string& run_dir, std::int64_t step) {
  std::string name = ".";
  name += step_name(step);
  name += ".tmp";
  return fs::path(run_dir) / name;
}

// An empty <run>/.step_<N>.tmp/ to write the checkpoint into.
fs::path prepare_temporary(const std::string& run_dir, std::int64_t step) {
  std::error_code error;
  fs::create_directories(run_dir, error);
  if (error) fail(ErrorCategory::io, "cannot create checkpoint directory '", run_dir, "': ", error.message());
  const fs::path temporary = temporary_dir(run_dir, step);
  fs::remove_all(temporary, error);
  fs::create_directory(temporary, error);
  if (error) fail(ErrorCategory::io, "cannot create '", temporary.string(), "': ", error.message());
  return temporary;
}

// Writes state.json into the finished temporary folder, then moves it into place and names it in
// `latest`; returns the checkpoint's directory.
std::string commit(const std::string& run_dir, const fs::path& temporary, std::int64_t step, const json& manifest) {
  write_file_atomically((temporary / "state.json").string(), manifest.dump(2) + "\n");
  sync_path(temporary.string());
  const std::string name = step_name(step);
  const fs::path final_dir = fs::path(run_dir) / name;
  std::error_code error;
  // A re-save of the same step moves the old copy aside first and deletes it only once the new
  // one is in place and named by `latest`, so no crash leaves `latest` naming a missing directory.
  const fs::path replaced = fs::path(run_dir) / ("." + name + ".old");
  fs::remove_all(replaced, error);
  const bool had_old = fs::exists(final_dir);
  if (had_old) {
    fs::rename(final_dir, replaced, error);
    if (error) fail(ErrorCategory::io, "cannot move the old '", final_dir.string(), "' aside: ", error.message());
    write_file_atomically((fs::path(run_dir) / "latest").string(), replaced.filename().string() + "\n");
  }
  fs::rename(temporary, final_dir, error);
  if (error) fail(ErrorCategory::io, "cannot move '", temporary.string(), "' to '", final_dir.string(), "': ", error.message());
  sync_path(run_dir);
  write_file_atomically((fs::path(run_dir) / "latest").string(), name + "\n");
  if (had_old) fs::remove_all(replaced, error);
  return final_dir.string();
}

std::string write_consolidated(const std::string& run_dir, const model::Model& model,
                               const optim::Optimizer& optimizer, const std::vector<NamedTensor>& weights,
                               const std::vector<optim::StateTensor>& optimizer_state,
                               const TrainingProgress& progress) {
  const fs::path temporary = prepare_temporary(run_dir, progress.step);
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
  json manifest = manifest_json(model, optimizer, progress);
  manifest["files"] = files;
  return commit(run_dir, temporary, progress.step, manifest);
}

// Every rank writes its own file; rank 0 prepares the folder first and commits it once every
// file is written; a failure anywhere fails the save on every rank and leaves `latest` as it was.
std::string save_sharded(const std::string& run_dir, const model::Model& model, const optim::Optimizer& optimizer,
                         const TrainingProgress& progress, comm::Communicator* comm) {
  const int rank = comm != nullptr ? comm->rank() : 0, world = comm != nullptr ? comm->size() : 1;
  auto agree = [&](std::exception_ptr failure, const char* what) {
    if (comm != nullptr) {
      comm::throw_if_any_failed(*comm, failure, what);
    } else if (failure) {
      std::rethrow_exception(failure);
    }
  };
  std::exception_ptr failure;
  const fs::path temporary = temporary_dir(run_dir, progress.step);
  if (rank == 0) {
    try {
      prepare_temporary(run_dir, progress.step);
    } catch (...) {
      failure = std::current_exception();
    }
  }
  agree(failure, "preparing a checkpoint folder");
  std::vector<std::int64_t> digests(static_cast<std::size_t>(2 * world), 0);
  try {
    const FileDigest d = detail::write_rank_file(temporary.string(), model, optimizer, rank, world);
    digests[static_cast<std::size_t>(2 * rank)] = static_cast<std::int64_t>(d.bytes);
    digests[static_cast<std::size_t>(2 * rank + 1)] = d.crc32;
  } catch (...) {
    failure = std::current_exception();
  }
  agree(failure, "writing a checkpoint");
  if (comm != nullptr) digests = comm::all_reduce_values(*comm, digests, comm::ReduceOp::sum);
  std::string where = (fs::path(run_dir) / step_name(progress.step)).string();
  if (rank == 0) {
    try {
      json files = json::object();
      for (int r = 0; r < world; ++r) {
        files[detail::rank_file_name(r)] = {{"bytes", digests[static_cast<std::size_t>(2 * r)]},
                                            {"crc32", digests[static_cast<std::size_t>(2 * r + 1)]}};
      }
      const model::ParameterSpace& space = model.parameter_space();
      json manifest = manifest_json(model, optimizer, progress);
      manifest["format"] = detail::sharded_checkpoint_format;
      manifest["world"] = world;
      manifest["layout"] = {{"values", space.value_mode() == model::ValueMode::full ? "full" : "sharded"},
                            {"optimizer", optimizer.sharded() ? "sharded" : "full"},
                            {"space_ranks", space.ranks()}};
      manifest["files"] = files;
      json model_tensors = json::array(), optimizer_tensors = json::array();
      for (const model::Slot& slot : space.slots()) model_tensors.push_back(slot.parameter->name());
      for (const auto& [name, shape] : optim::state_layout(optimizer)) optimizer_tensors.push_back(name);
      manifest["tensors"] = {{"model", model_tensors}, {"optimizer", optimizer_tensors}};
      where = commit(run_dir, temporary, progress.step, manifest);
    } catch (...) {
      failure = std::current_exception();
    }
  }
  agree(failure, "committing a checkpoint");
  return where;
}

}  // namespace

std::string save_checkpoint(const std::string& run_dir, const model::Model& model, const optim::Optimizer& optimizer,
                            const TrainingProgress& progress, comm::Communicator* comm, CheckpointLayout layout) {
  if (layout == CheckpointLayout::sharded) {
    require(comm != nullptr || (!optimizer.sharded() && model.parameter_space().value_mode() == model::ValueMode::full),
            "save_checkpoint: the model or optimizer holds one rank's shard; pass the data-parallel communicator");
    return save_sharded(run_dir, model, optimizer, progress, comm);
  }
  require(comm != nullptr || !optimizer.sharded(), "save_checkpoint: the optimizer holds one rank's shard; pass the "
          "data-parallel communicator so the state can be gathered");
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
  for (const char* file : data_files) {
    const std::string file_path = (fs::path(dir) / file).string();
    const std::string bytes = read_file(file_path);
    const std::uint32_t crc = crc32(std::span(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size()));
    const detail::CheckpointManifest::File& expected = v.manifest.files.at(file);
    if (bytes.size() != expected.bytes || crc != expected.crc32) {
      fail(ErrorCategory::corrupt_data, "checkpoint file '", file_path, "' is damaged: ", bytes.size(),
           " bytes with CRC-32 ", crc, ", expected ", expected.bytes, " bytes with CRC-32 ", expected.crc32);
    }
    v.contents.push_back(parse_safetensors(bytes, file_path));
  }
  return v;
}

}  // namespace

std::int64_t verify_checkpoint(const std::string& dir) {
  detail::CheckpointManifest manifest = detail::read_manifest(dir);
  if (manifest.version == 2) {
    detail::verify_sharded(dir, manifest);
    return manifest.progress.step;
  }
  return read_verified(dir, std::move(manifest)).manifest.progress.step;
}

TrainingProgress load_checkpoint(const std::string& path, model::Model& model, optim::Optimizer& optimizer) {
  std::string dir = path;
  if (!fs::exists(fs::path(path) / "state.json")) {
    const std::optional<std::string> latest = latest_checkpoint(path);
    if (!latest) fail(ErrorCategory::io, "'", path, "' is neither a checkpoint (no state.json) nor a run directory with "
                      "a 'latest' checkpoint");
    dir = *latest;
  }
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
  const model::ParameterSpace& space = model.parameter_space();
  for (std::size_t s = 0; s < space.slots().size(); ++s) {
    load_value(space, s, weights.tensors.at(space.slots()[s].parameter->name()));
  }
  optim::scatter_state(optimizer, state.tensors);
  optimizer.set_steps_taken(manifest.optimizer_steps);
  return manifest.progress;
}

}  // namespace loom::io
