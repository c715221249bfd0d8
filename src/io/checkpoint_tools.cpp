#include "loom/io/checkpoint_tools.hpp"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <sstream>

#include "loom/core/error.hpp"
#include "loom/io/checkpoint.hpp"
#include "loom/io/at_rest.hpp"
#include "loom/io/files.hpp"
#include "loom/io/safetensors.hpp"
#include "src/io/sharded_checkpoint.hpp"

namespace loom::io {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Writes `names` of the sharded checkpoint, each assembled whole, into one safetensors file.
FileDigest write_assembled(const std::string& path, const std::vector<std::string>& names,
                     const std::vector<std::unique_ptr<PieceFile>>& files,
                     const std::map<std::string, std::vector<detail::StoredRef>>& stored,
                     const std::map<std::string, std::string>& metadata) {
  std::vector<SafetensorsWriter::Spec> specs;
  for (const std::string& name : names) {
    const auto it = stored.find(name);
    if (it == stored.end()) fail(ErrorCategory::corrupt_data, "checkpoint: state.json lists '", name, "', which no file holds");
    const PieceEntry& e = files[it->second.front().file]->pieces()[it->second.front().index];
    specs.push_back({name, e.dtype, e.piece.global});
  }
  SafetensorsWriter writer(path, specs, metadata);
  for (const std::string& name : names) writer.write(name, detail::assemble_tensor(files, stored.at(name)));
  return writer.finish();
}

std::map<std::string, std::string> weights_metadata(const detail::CheckpointManifest& m) {
  return {{"format", "pt"}, {"loom_architecture", m.architecture}, {"loom_config", m.config.dump()},
          {"loom_precision", m.precision}};
}

// The architecture's sizes from a manifest's or a weights file's config object.
std::map<std::string, std::int64_t> config_sizes(const json& config, const std::string& where) {
  require(config.is_object(), "'", where, "': the model config is not a JSON object");
  std::map<std::string, std::int64_t> sizes;
  for (const auto& [field, value] : config.items()) {
    require(value.is_number_integer(), "'", where, "': model config field '", field, "' is ", value.dump(),
            ", not an integer");
    sizes[field] = value.get<std::int64_t>();
  }
  return sizes;
}

}  // namespace

std::string describe_checkpoint(const std::string& dir, bool verify_pieces) {
  const detail::CheckpointManifest m = detail::read_manifest(dir);
  std::ostringstream out;
  out << "checkpoint " << dir << "\n  format loom-checkpoint-" << m.version << ", step " << m.progress.step << ", "
      << m.architecture << " " << m.config.dump() << ", " << m.precision << ", " << m.optimizer << " ("
      << m.optimizer_steps << " steps), " << m.progress.batches_consumed << " batches consumed\n";
  if (m.version == 1) {
    for (const auto& [name, file] : m.files) out << "  " << name << ": " << file.bytes << " bytes, CRC-32 " << file.crc32 << "\n";
    if (verify_pieces) out << "  verified: " << (verify_checkpoint(dir), "every file's size and CRC-32") << "\n";
    return out.str();
  }
  out << "  written by " << m.world << " rank(s): " << m.model_tensors.size() << " model tensors, "
      << m.optimizer_tensors.size() << " optimizer tensors\n";
  const auto files = detail::open_piece_files(dir, m);
  std::size_t bad = 0;
  for (const auto& file : files) {
    out << "  " << fs::path(file->path()).filename().string() << ": " << plaintext_size(file->path(), m.data_files()) << " bytes, "
        << file->pieces().size() << " pieces";
    if (verify_pieces) {
      std::size_t failed = 0;
      for (std::size_t i = 0; i < file->pieces().size(); ++i) {
        try {
          file->read(i);
        } catch (const Error& error) {
          out << "\n    FAILED: " << error.what();
          ++failed;
        }
      }
      out << (failed == 0 ? ", every CRC-32 verified" : "");
      bad += failed;
    }
    out << "\n";
  }
  const auto stored = detail::stored_tensors(files);
  for (const auto& [name, refs] : stored) {
    const PieceEntry& e = files[refs.front().file]->pieces()[refs.front().index];
    out << "  " << name << " " << e.dtype << " " << e.piece.global << ": " << refs.size() << " piece(s)\n";
  }
  if (bad > 0) fail(ErrorCategory::corrupt_data, out.str(), "  ", bad, " piece(s) failed their CRC-32");
  return out.str();
}

void consolidate_checkpoint(const std::string& dir, const std::string& out_dir) {
  const detail::CheckpointManifest m = detail::read_manifest(dir);
  require(m.version == 2, "consolidate: '", dir, "' is already a consolidated (loom-checkpoint-1) checkpoint");
  require(!fs::exists(out_dir), "consolidate: '", out_dir, "' exists; give a new directory");
  verify_checkpoint(dir);
  const auto files = detail::open_piece_files(dir, m);
  const auto stored = detail::stored_tensors(files);
  create_private_directories(out_dir);
  const char* names[] = {"model.safetensors", "optimizer.safetensors"};
  write_assembled((fs::path(out_dir) / names[0]).string(), m.model_tensors, files, stored, weights_metadata(m));
  write_assembled((fs::path(out_dir) / names[1]).string(), m.optimizer_tensors, files, stored,
                  {{"loom_optimizer", m.optimizer}, {"optimizer_steps", std::to_string(m.optimizer_steps)}});
  json manifest = json::parse(read_at_rest((fs::path(dir) / "state.json").string(), m.data_files()));
  manifest["format"] = "loom-checkpoint-1";
  for (const char* key : {"world", "layout", "tensors"}) manifest.erase(key);
  manifest["files"] = json::object();
  for (const char* name : names) {
    const FileDigest d = digest_at_rest((fs::path(out_dir) / name).string());
    manifest["files"][name] = {{"bytes", d.bytes}, {"crc32", d.crc32}};
  }
  write_at_rest_atomically((fs::path(out_dir) / "state.json").string(), manifest.dump(2) + "\n");
  sync_path(out_dir);
}

void export_weights(const std::string& dir, const std::string& out_file) {
  const detail::CheckpointManifest m = detail::read_manifest(dir);
  if (m.version == 2) {
    const auto files = detail::open_piece_files(dir, m);
    write_assembled(out_file, m.model_tensors, files, detail::stored_tensors(files), weights_metadata(m));
    return;
  }
  verify_checkpoint(dir);
  const std::string model = (fs::path(dir) / "model.safetensors").string();
  // Read where each tensor lies, in file order (an encrypted file streams through once).
  PlaintextReader file(model, m.data_files());
  const SafetensorsIndex index = read_safetensors_index(file);
  std::vector<std::pair<std::uint64_t, std::string>> order;  // the file's own order
  for (const auto& [name, entry] : index.entries) order.emplace_back(entry.begin, name);
  std::sort(order.begin(), order.end());
  std::vector<SafetensorsWriter::Spec> specs;
  for (const auto& [at, name] : order) specs.push_back({name, index.entries.at(name).dtype, index.entries.at(name).shape});
  SafetensorsWriter writer(out_file, specs, weights_metadata(m));
  for (const auto& [at, name] : order) {
    writer.write(name, read_safetensors_tensor(file, index, name));
  }
  writer.finish();
}

ModelWeights read_model_weights(const std::string& path) {
  ModelWeights weights;
  if (fs::is_directory(path)) {
    const std::string dir = checkpoint_or_latest(path);
    const detail::CheckpointManifest m = detail::read_manifest(dir);
    weights.architecture = m.architecture;
    weights.config = config_sizes(m.config, dir);
    weights.precision = m.precision;
    if (m.version == 2) {  // each piece is checked against its CRC-32 as it is assembled
      const auto files = detail::open_piece_files(dir, m);
      const auto stored = detail::stored_tensors(files);
      for (const std::string& name : m.model_tensors) {
        const auto it = stored.find(name);
        if (it == stored.end()) fail(ErrorCategory::corrupt_data, "checkpoint '", dir, "': state.json lists '", name,
                                     "', which no file holds");
        weights.tensors[name] = detail::assemble_tensor(files, it->second);
      }
    } else {  // the model's file alone is checked: the optimizer's is no business of the weights
      weights.tensors = detail::read_verified_file(dir, m, "model.safetensors").tensors;
    }
    return weights;
  }
  SafetensorsContents file = read_safetensors(path);
  const auto config = file.metadata.find("loom_config");
  require(config != file.metadata.end(), "'", path, "' is not a loom weights file (its metadata has no loom_config; "
          "loom-ckpt export and loom-convert write them; a Hugging Face model is read by its directory, hf:DIR)");
  json parsed = json::parse(config->second, nullptr, false);
  require(!parsed.is_discarded(), "'", path, "': its loom_config metadata is not JSON");
  weights.config = config_sizes(parsed, path);
  const auto architecture = file.metadata.find("loom_architecture");
  // Weights files written before other models existed name none: they hold a GPT.
  weights.architecture = architecture != file.metadata.end() ? architecture->second : "gpt";
  const auto precision = file.metadata.find("loom_precision");
  weights.precision = precision != file.metadata.end() ? precision->second : "";
  weights.tensors = std::move(file.tensors);
  return weights;
}

void write_model_weights(const std::string& file, const ModelWeights& weights) {
  std::vector<NamedTensor> tensors;
  for (const auto& [name, tensor] : weights.tensors) tensors.push_back({name, tensor});
  json config = json::object();
  for (const auto& [field, value] : weights.config) config[field] = value;
  write_safetensors(file, tensors, {{"format", "pt"}, {"loom_architecture", weights.architecture},
                                    {"loom_config", config.dump()}, {"loom_precision", weights.precision}});
}

}  // namespace loom::io
