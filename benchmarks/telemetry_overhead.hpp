// train_bench --telemetry: the cost of loom's telemetry on the training step, measured with one
// Trainer per configuration stepped in turn (every configuration sees the same machine):
//   off     no phase timers, no straggler exchange (the baseline)
//   phases  the always-on default: phase timers, a straggler exchange every 50 steps
//   trace   phases and a Chrome trace of every timed step (units, phases, data waits)
//   nvml    phases and NVML sampling every 100 ms on a background thread (where NVML loads:
//           the GPU's, or LOOM_NVML_LIBRARY's)
// Targets (issue 30): phases <= 1% over off, trace <= 2%.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "loom/core/device.hpp"
#include "loom/nn/gpt.hpp"

namespace loom::bench {

nlohmann::json compare_telemetry(const nn::GPTConfig& config, const nn::Precision& precision, Device device,
                                 std::int64_t batch, int steps, int warmup, const std::vector<std::string>& modes);

}  // namespace loom::bench
