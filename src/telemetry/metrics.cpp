#include "loom/telemetry/metrics.hpp"

#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>

#include "loom/core/error.hpp"
#include "loom/io/files.hpp"

namespace loom::telemetry {

namespace {

// JSON has no NaN or infinity (a skipped step's norm is one): null.
nlohmann::json number(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

nlohmann::json by_category(const CategoryBytes& bytes) {
  nlohmann::json out = nlohmann::json::object();
  for (std::size_t c = 0; c < memory_category_count; ++c) {
    out[std::string(to_string(static_cast<MemoryCategory>(c)))] = bytes[c];
  }
  return out;
}

// Prometheus' float format: NaN and infinities are spelled out, other values in full precision.
std::string sample(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  std::ostringstream out;
  out.precision(17);
  out << v;
  return out.str();
}

class Exposition {
 public:
  explicit Exposition(int rank) : rank_("rank=\"" + std::to_string(rank) + "\"") {}
  void family(const char* name, const char* type, const char* help) {
    out_ << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n';
  }
  void value(const char* name, double v, const std::string& labels = "") {
    out_ << name << '{' << rank_ << (labels.empty() ? "" : ",") << labels << "} " << sample(v) << '\n';
  }
  // A sample about another rank (the straggler window's): its rank is the label.
  void value_of(const char* name, int rank, double v, const std::string& labels = "") {
    out_ << name << "{rank=\"" << rank << '"' << (labels.empty() ? "" : ",") << labels << "} " << sample(v) << '\n';
  }
  void scalar(const char* name, const char* type, const char* help, double v) {
    family(name, type, help);
    value(name, v);
  }
  std::string text() const { return out_.str(); }

 private:
  std::string rank_;
  std::ostringstream out_;
};

}  // namespace

std::string json_line(const StepMetrics& m) {
  nlohmann::json phases = nlohmann::json::object();
  for (Phase p : all_phases) phases[std::string(phase_name(p))] = m.phases[p];
  nlohmann::json line = {{"step", m.step},
                         {"rank", m.rank},
                         {"loss", number(m.loss)},
                         {"lr", m.lr},
                         {"grad_norm", number(m.grad_norm)},
                         {"skipped", m.skipped},
                         {"skipped_total", m.skipped_total},
                         {"loss_scale", m.loss_scale},
                         {"step_seconds", m.seconds},
                         {"tokens_per_second", m.tokens_per_second},
                         {"mfu", m.mfu ? number(*m.mfu) : nlohmann::json(nullptr)},
                         {"hfu", m.hfu ? number(*m.hfu) : nlohmann::json(nullptr)},
                         {"phase_seconds", phases}};
  if (m.stragglers) {
    nlohmann::json ranks = nlohmann::json::array(), named = nlohmann::json::array();
    for (const RankWindow& r : m.stragglers->ranks) {
      nlohmann::json rank_phases = nlohmann::json::object();
      for (Phase p : all_phases) rank_phases[std::string(phase_name(p))] = r.phases[p];
      ranks.push_back({{"rank", r.rank}, {"step_seconds", r.step_seconds}, {"phase_seconds", rank_phases}});
    }
    for (const StragglerFinding& f : m.stragglers->findings) {
      named.push_back({{"rank", f.rank}, {"phase", phase_name(f.phase)}, {"excess", f.excess()}, {"steps", f.steps},
                       {"seconds", f.seconds}, {"median_seconds", f.median_seconds}});
    }
    line["window"] = {{"last_step", m.stragglers->last_step}, {"steps", m.stragglers->steps}, {"ranks", ranks},
                      {"stragglers", named}};
  }
  nlohmann::json communication = nlohmann::json::object();
  for (std::size_t k = 0; k < collective_kinds; ++k) {
    const auto kind = static_cast<CollectiveKind>(k);
    const CollectiveTotals& t = m.communication[kind];
    if (t.calls == 0) continue;
    nlohmann::json entry = {{"calls", t.calls}, {"measured_calls", t.measured_calls}, {"bytes", t.bytes},
                            {"seconds", t.seconds}, {"bus_bytes_per_second", m.communication.bus_bytes_per_second(kind)},
                            // device: the backend's events timed every measured call; host: call to completion
                            {"timed_on", t.measured_calls > 0 && t.device_timed_calls == t.measured_calls ? "device" : "host"}};
    if (const auto predicted = m.communication.predicted_bus_bytes_per_second(kind)) {
      entry["predicted_bus_bytes_per_second"] = *predicted;
      entry["achieved_over_predicted"] = m.communication.bus_bytes_per_second(kind) / *predicted;
    }
    communication[std::string(collective_name(kind))] = entry;
  }
  line["communication"] = communication;
  if (m.gpu) {
    nlohmann::json gpu = nlohmann::json::object();
    const auto put = [&](const char* name, const auto& value) {
      if (value) gpu[name] = *value;
    };
    put("utilization_percent", m.gpu->utilization_percent);
    put("memory_utilization_percent", m.gpu->memory_utilization_percent);
    put("memory_used_bytes", m.gpu->memory_used_bytes);
    put("memory_total_bytes", m.gpu->memory_total_bytes);
    put("power_watts", m.gpu->power_watts);
    put("sm_clock_mhz", m.gpu->sm_clock_mhz);
    put("temperature_c", m.gpu->temperature_c);
    put("throttle_reasons", m.gpu->throttle_reasons);
    put("pcie_tx_bytes_per_second", m.gpu->pcie_tx_bytes_per_second);
    put("pcie_rx_bytes_per_second", m.gpu->pcie_rx_bytes_per_second);
    put("nvlink_tx_bytes_per_second", m.gpu->nvlink_tx_bytes_per_second);
    put("nvlink_rx_bytes_per_second", m.gpu->nvlink_rx_bytes_per_second);
    line["gpu"] = gpu;
  }
  if (m.memory_live) line["memory_live_bytes"] = by_category(*m.memory_live);
  if (m.memory_peak) {
    line["memory_peak_bytes"] = by_category(*m.memory_peak);
    line["memory_peak_total_bytes"] = m.memory_peak_total;
  }
  return line.dump();
}

std::string prometheus_text(const StepMetrics& m) {
  Exposition e(m.rank);
  e.scalar("loom_step", "gauge", "The last completed optimizer step.", static_cast<double>(m.step));
  e.scalar("loom_loss", "gauge", "Training loss of the last step.", m.loss);
  e.scalar("loom_learning_rate", "gauge", "Learning rate of the last step.", m.lr);
  e.scalar("loom_grad_norm", "gauge", "Gradient L2 norm of the last step, before clipping.", m.grad_norm);
  e.scalar("loom_loss_scale", "gauge", "Dynamic loss scale after the last step.", m.loss_scale);
  e.scalar("loom_skipped_steps_total", "counter", "Steps skipped for a non-finite gradient.", static_cast<double>(m.skipped_total));
  e.scalar("loom_step_seconds", "gauge", "Wall time of the last step.", m.seconds);
  e.scalar("loom_tokens_per_second", "gauge", "Tokens per second of the job over the last step.", m.tokens_per_second);
  if (m.mfu) {
    e.scalar("loom_mfu_ratio", "gauge", "Model FLOPs over the dense peak of the GPU and precision.", *m.mfu);
  }
  if (m.hfu) {
    e.scalar("loom_hfu_ratio", "gauge", "Hardware FLOPs (with recomputation) over the dense peak.", *m.hfu);
  }
  e.family("loom_phase_seconds", "gauge", "Seconds of the last step spent in each phase.");
  for (Phase p : all_phases) e.value("loom_phase_seconds", m.phases[p], "phase=\"" + std::string(phase_name(p)) + "\"");
  const auto memory = [&](const char* name, const char* help, const CategoryBytes& bytes) {
    e.family(name, "gauge", help);
    for (std::size_t c = 0; c < memory_category_count; ++c) {
      e.value(name, static_cast<double>(bytes[c]),
              "category=\"" + std::string(to_string(static_cast<MemoryCategory>(c))) + "\"");
    }
  };
  if (m.stragglers && m.rank == 0) {  // every rank's window is the same: one file carries it
    e.family("loom_window_step_seconds", "gauge", "Each rank's average step time over the last straggler window.");
    for (const RankWindow& r : m.stragglers->ranks) e.value_of("loom_window_step_seconds", r.rank, r.step_seconds);
    e.family("loom_window_phase_seconds", "gauge", "Each rank's average seconds per phase over the last straggler window.");
    for (const RankWindow& r : m.stragglers->ranks) {
      for (Phase p : all_phases) {
        e.value_of("loom_window_phase_seconds", r.rank, r.phases[p], "phase=\"" + std::string(phase_name(p)) + "\"");
      }
    }
    e.family("loom_straggler_windows_total", "counter", "Straggler windows in which a rank's phase was named as slow.");
    for (const auto& [key, count] : m.stragglers->named_windows) {
      e.value_of("loom_straggler_windows_total", key.first, static_cast<double>(count),
                 "phase=\"" + std::string(phase_name(key.second)) + "\"");
    }
  }
  {
    bool declared = false;
    for (std::size_t k = 0; k < collective_kinds; ++k) {
      const auto kind = static_cast<CollectiveKind>(k);
      if (m.communication[kind].measured_calls == 0 || m.communication.ranks < 2) continue;
      if (!declared) {
        e.family("loom_comm_bus_bytes_per_second", "gauge",
                 "Bus bandwidth the last step's collectives achieved (nccl-tests' bus factor), by collective.");
        declared = true;
      }
      e.value("loom_comm_bus_bytes_per_second", m.communication.bus_bytes_per_second(kind),
              "collective=\"" + std::string(collective_name(kind)) + "\"");
    }
  }
  if (m.gpu) {
    const auto gauge = [&](const char* name, const char* help, const auto& value, double scale) {
      if (value) e.scalar(name, "gauge", help, static_cast<double>(*value) * scale);
    };
    const GpuSample& g = *m.gpu;
    gauge("loom_gpu_utilization_ratio", "Fraction of the last sample period a kernel ran (NVML).", g.utilization_percent, 0.01);
    gauge("loom_gpu_memory_used_bytes", "GPU memory in use (NVML).", g.memory_used_bytes, 1);
    gauge("loom_gpu_memory_total_bytes", "GPU memory in all (NVML).", g.memory_total_bytes, 1);
    gauge("loom_gpu_power_watts", "GPU power draw (NVML).", g.power_watts, 1);
    gauge("loom_gpu_sm_clock_hertz", "SM clock (NVML).", g.sm_clock_mhz, 1e6);
    gauge("loom_gpu_temperature_celsius", "GPU temperature (NVML).", g.temperature_c, 1);
    gauge("loom_gpu_throttle_reasons", "NVML's clock throttle reason bits (0: none).", g.throttle_reasons, 1);
    gauge("loom_gpu_pcie_transmit_bytes_per_second", "PCIe bytes sent per second (NVML).", g.pcie_tx_bytes_per_second, 1);
    gauge("loom_gpu_pcie_receive_bytes_per_second", "PCIe bytes received per second (NVML).", g.pcie_rx_bytes_per_second, 1);
    gauge("loom_gpu_nvlink_transmit_bytes_per_second", "NVLink data bytes sent per second (NVML).",
          g.nvlink_tx_bytes_per_second, 1);
    gauge("loom_gpu_nvlink_receive_bytes_per_second", "NVLink data bytes received per second (NVML).",
          g.nvlink_rx_bytes_per_second, 1);
  }
  if (m.memory_live) memory("loom_memory_bytes", "Bytes allocated at the end of the last step, by category.", *m.memory_live);
  if (m.memory_peak) memory("loom_memory_peak_bytes", "Most bytes allocated during the last step, by category.", *m.memory_peak);
  return e.text();
}

MetricsFile::MetricsFile(const std::string& path) : path_(path) {
  try {
    io::create_private_file(path);
  } catch (const Error&) {
    fail(ErrorCategory::io, "cannot open the metrics file '", path, "' for writing");
  }
  out_.open(path, std::ios::out | std::ios::trunc);
  if (!out_) fail(ErrorCategory::io, "cannot open the metrics file '", path, "' for writing");
}

void MetricsFile::write(const StepMetrics& m) {
  out_ << json_line(m) << '\n';
  out_.flush();
  if (!out_) fail(ErrorCategory::io, "writing the metrics file '", path_, "' failed");
}

void write_prometheus_file(const std::string& path, const StepMetrics& m) {
  io::write_file_atomically(path, prometheus_text(m));
}

}  // namespace loom::telemetry
