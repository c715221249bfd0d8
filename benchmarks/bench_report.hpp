// What every loom benchmark shares: timing statistics and the JSON record (commit, machine,
// configuration, rows).
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "loom/core/stream.hpp"
#include "loom/core/tensor.hpp"
#include "loom/kernels/cpu_isa.hpp"

namespace loom::bench {

double median(std::vector<double> samples);

// Median time of fn over repeats, after one warm-up call, in seconds, between events recorded on
// stream around it: host time on the CPU, device time on a GPU.
double median_seconds(const std::function<void()>& fn, int repeats, const Stream& stream = Stream());

// Host-timed medians of several contenders run round-robin (one call each per round, after one
// warm-up round), so that a noisy machine slows them all alike. Seconds, in the order given. A
// pause before each contender's turn lets the previous contender's spinning worker threads (OpenMP,
// OpenBLAS) go to sleep, so that they do not steal cores from the next one; an untimed call then
// wakes the contender's own threads before the timed one.
std::vector<double> interleaved_median_seconds(const std::vector<std::function<void()>>& contenders, int repeats,
                                               std::chrono::milliseconds pause = std::chrono::milliseconds(0));

// The CPU, its kernel variants and caches, and the GEMM blocking each variant gets on them:
// {"model", "kernels" (the active variant), "supported", "caches", "gemm_blocking"}.
nlohmann::json cpu_description();

// "avx2 mc 168, nc 4096, kc 384, B sliver in L1 (tile 6 x 16)": the fp32 GEMM blocking a variant
// runs with here.
std::string gemm_blocking_text(kernels::CpuIsa isa);

// {"benchmark", "commit", "machine": {host, cpus, cpu, gpus, build}, "config", "rows"}
nlohmann::json make_record(const std::string& benchmark, const nlohmann::json& config);

// "auto": the first GPU when one is usable, else the CPU; otherwise Device::parse(name).
Device bench_device(const std::string& name);

// Uniform values in [-1, 1) drawn as f32 on the host, cast to dtype, placed on device.
Tensor random_tensor(const Shape& shape, DType dtype, Device device, std::mt19937& rng);

// Writes record to path (pretty-printed); throws an io loom::Error when it cannot.
void write_json(const std::string& path, const nlohmann::json& record);

}  // namespace loom::bench
