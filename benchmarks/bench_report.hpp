// What every loom benchmark shares: timing statistics and the JSON record (commit, machine,
// configuration, rows).
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace loom::bench {

double median(std::vector<double> samples);

// {"benchmark", "commit", "machine": {host, cpus, gpus, build}, "config", "rows"}
nlohmann::json make_record(const std::string& benchmark, const nlohmann::json& config);

// Writes record to path (pretty-printed); throws an io loom::Error when it cannot.
void write_json(const std::string& path, const nlohmann::json& record);

}  // namespace loom::bench
