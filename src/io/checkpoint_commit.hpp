// How a checkpoint becomes the one `latest` names (io/checkpoint.hpp): written into
// <run>/.step_<N>.tmp/, every file fsync'ed, then state.json, then renamed into place and named in
// `latest` atomically. And the state.json fields every layout shares. Used by the synchronous
// save (checkpoint.cpp) and the background one (checkpoint_writer.cpp).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <string>

#include "loom/io/checkpoint.hpp"

namespace loom::io::detail {

// "step_00000042"
std::string step_name(std::int64_t step);
// <run>/.step_<N>.tmp
std::filesystem::path temporary_dir(const std::string& run_dir, std::int64_t step);
// An empty <run>/.step_<N>.tmp/ to write the checkpoint into (run_dir is created if needed).
std::filesystem::path prepare_temporary(const std::string& run_dir, std::int64_t step);
// Writes state.json into the finished temporary folder, then moves it into place and names it in
// `latest`; returns the checkpoint's directory.
std::string commit(const std::string& run_dir, const std::filesystem::path& temporary, std::int64_t step,
                   const nlohmann::json& manifest);

// The model's architecture sizes, as state.json's "config".
nlohmann::json config_json(const model::Model& model);
// state.json of a loom-checkpoint-1, without "files".
nlohmann::json manifest_json(const model::Model& model, const optim::Optimizer& optimizer,
                             const TrainingProgress& progress);

}  // namespace loom::io::detail
