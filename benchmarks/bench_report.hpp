// What every loom benchmark shares: timing statistics and the JSON record (commit, machine,
// configuration, rows).
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

#include "loom/core/stream.hpp"

namespace loom::bench {

double median(std::vector<double> samples);

// Median time of fn over repeats, after one warm-up call, in seconds, between events recorded on
// stream around it: host time on the CPU, device time on a GPU.
double median_seconds(const std::function<void()>& fn, int repeats, const Stream& stream = Stream());

// {"benchmark", "commit", "machine": {host, cpus, gpus, build}, "config", "rows"}
nlohmann::json make_record(const std::string& benchmark, const nlohmann::json& config);

// Writes record to path (pretty-printed); throws an io loom::Error when it cannot.
void write_json(const std::string& path, const nlohmann::json& record);

}  // namespace loom::bench
