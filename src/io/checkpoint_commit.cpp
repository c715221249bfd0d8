#include "src/io/checkpoint_commit.hpp"

#include <cstdio>

#include "loom/core/error.hpp"
#include "loom/io/at_rest.hpp"
#include "loom/io/files.hpp"
#include "src/io/checkpoint_manifest.hpp"

namespace loom::io::detail {

namespace fs = std::filesystem;
using nlohmann::json;

std::string step_name(std::int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step_%08lld", static_cast<long long>(step));
  return name;
}

fs::path temporary_dir(const std::string& run_dir, std::int64_t step) {
  std::string name = ".";  // appended piece by piece: GCC 12 warns falsely about "." + a temporary
  name += step_name(step);
  name += ".tmp";
  return fs::path(run_dir) / name;
}

fs::path prepare_temporary(const std::string& run_dir, std::int64_t step) {
  require_not_writable_by_others(run_dir, "checkpoint folder");
  create_private_directories(run_dir);
  const fs::path temporary = temporary_dir(run_dir, step);
  std::error_code error;
  fs::remove_all(temporary, error);
  create_private_directories(temporary.string());
  return temporary;
}

std::string commit(const std::string& run_dir, const fs::path& temporary, std::int64_t step, const json& manifest) {
  write_at_rest_atomically((temporary / "state.json").string(), manifest.dump(2) + "\n");
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

json config_json(const model::Model& model) {
  json config = json::object();
  for (const auto& [field, value] : model.architecture()) config[field] = value;
  return config;
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

}  // namespace loom::io::detail
