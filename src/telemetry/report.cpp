#include "loom/telemetry/report.hpp"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "loom/comm/agreement.hpp"
#include "loom/io/files.hpp"

namespace loom::telemetry {

namespace {

constexpr std::size_t fields = 2 + phase_count + 2 + 6;  // rank, step, phases, memory x2, gpu x6

std::string fmt(const char* format, double v) {
  char text[64];
  std::snprintf(text, sizeof text, format, v);
  return text;
}

double gib(std::int64_t bytes) { return static_cast<double>(bytes) / (1LL << 30); }

// Compute: what a rank did itself, the step less the exposed communication it waited in.
double compute_of(const RankSummary& r) { return r.step_seconds - r.phases[Phase::communication]; }

}  // namespace

void RunTotals::add(double step_seconds, const PhaseSeconds& phases, std::int64_t memory_peak_bytes) {
  ++steps_;
  seconds_ += step_seconds;
  for (Phase p : all_phases) phases_[p] += phases[p];
  memory_peak_ = std::max(memory_peak_, memory_peak_bytes);
}

PhaseSeconds RunTotals::phases_mean() const {
  PhaseSeconds out;
  for (Phase p : all_phases) out[p] = steps_ > 0 ? phases_[p] / static_cast<double>(steps_) : 0;
  return out;
}

std::vector<RankSummary> gather_summaries(const RankSummary& mine, comm::Communicator* comm) {
  if (comm == nullptr || comm->size() == 1) return {mine};
  // f32 is all the report needs: seconds to 7 digits, bytes to 0.00001%.
  std::vector<float> v(fields, 0.0f);
  std::size_t i = 0;
  v[i++] = static_cast<float>(mine.rank);
  v[i++] = static_cast<float>(mine.step_seconds);
  for (Phase p : all_phases) v[i++] = static_cast<float>(mine.phases[p]);
  v[i++] = static_cast<float>(mine.memory_peak_bytes);
  v[i++] = static_cast<float>(mine.memory_capacity_bytes);
  if (mine.gpu) {
    const GpuSummary& g = *mine.gpu;
    v[i++] = static_cast<float>(g.samples);
    v[i++] = static_cast<float>(g.utilization_mean);
    v[i++] = static_cast<float>(g.utilization_p95);
    v[i++] = static_cast<float>(g.memory_used_max);
    v[i++] = static_cast<float>(g.memory_total);
    v[i++] = static_cast<float>(g.power_mean_watts);
  }
  const std::vector<float> all = comm::all_gather_values(*comm, v);
  std::vector<RankSummary> out;
  for (int r = 0; r < comm->size(); ++r) {
    const float* f = all.data() + static_cast<std::size_t>(r) * fields;
    RankSummary s;
    s.rank = static_cast<int>(f[0]);
    s.step_seconds = f[1];
    for (std::size_t p = 0; p < phase_count; ++p) s.phases.seconds[p] = f[2 + p];
    s.memory_peak_bytes = static_cast<std::int64_t>(f[2 + phase_count]);
    s.memory_capacity_bytes = static_cast<std::int64_t>(f[3 + phase_count]);
    if (const float* g = f + 4 + phase_count; g[0] > 0) {
      s.gpu = GpuSummary{.samples = static_cast<std::size_t>(g[0]), .utilization_mean = g[1], .utilization_p95 = g[2],
                         .memory_used_max = static_cast<std::uint64_t>(g[3]), .memory_total = static_cast<std::uint64_t>(g[4]),
                         .power_mean_watts = g[5]};
    }
    out.push_back(s);
  }
  return out;
}

double RunReport::communication_share() const {
  double communication = 0, step = 0;
  for (const RankSummary& r : ranks) {
    communication += r.phases[Phase::communication];
    step += r.step_seconds;
  }
  return step > 0 ? communication / step : 0;
}

int RunReport::slowest_rank() const {
  int slowest = ranks.empty() ? 0 : ranks.front().rank;
  double most = -1;
  for (const RankSummary& r : ranks) {
    if (compute_of(r) > most) {
      most = compute_of(r);
      slowest = r.rank;
    }
  }
  return slowest;
}

std::string report_markdown(const RunReport& report) {
  std::ostringstream md;
  md << "# loom run report\n\n"
     << "- job: " << report.job << "\n- device: " << report.device << "\n- steps: " << report.steps
     << "\n- throughput: " << fmt("%.0f", report.tokens_per_second) << " tokens/s"
     << (report.mfu ? ", MFU " + fmt("%.1f", 100 * *report.mfu) + "%" : std::string(", MFU: no GPU peak known"))
     << "\n- communication share of the step (exposed): " << fmt("%.1f", 100 * report.communication_share()) << "%"
     << "\n- slowest rank (most compute per step): " << report.slowest_rank() << "\n\n";
  md << "## Ranks\n\n| rank | step ms | data | forward | backward | communication | optimizer | checkpoint | "
        "memory peak GiB | usable GiB | headroom | GPU util mean | p95 |\n"
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
  for (const RankSummary& r : report.ranks) {
    md << "| " << r.rank << " | " << fmt("%.2f", 1e3 * r.step_seconds);
    for (Phase p : all_phases) md << " | " << fmt("%.2f", 1e3 * r.phases[p]);
    md << " | " << (r.memory_peak_bytes > 0 ? fmt("%.3g", gib(r.memory_peak_bytes)) : "-") << " | "
       << (r.memory_capacity_bytes > 0 ? fmt("%.1f", gib(r.memory_capacity_bytes)) : "-") << " | "
       << (r.memory_capacity_bytes > 0 && r.memory_peak_bytes > 0
               ? fmt("%.0f", 100.0 * (1.0 - static_cast<double>(r.memory_peak_bytes) /
                                                static_cast<double>(r.memory_capacity_bytes))) + "%"
               : "-")
       << " | " << (r.gpu ? fmt("%.0f", r.gpu->utilization_mean) + "%" : "-") << " | "
       << (r.gpu ? fmt("%.0f", r.gpu->utilization_p95) + "%" : "-") << " |\n";
  }
  md << "\nPhases are milliseconds per step; memory is the CPU allocator's peak, or on a GPU the most NVML saw "
        "in use, against what the rank may use.\n\n## The same job elsewhere (loom-plan)\n\n"
     << report.alternatives_basis << "\n\n| GPU | GPUs | layout | step ms | tokens/s | GPU-hours per 1B tokens |\n"
     << "| --- | ---: | --- | ---: | ---: | ---: |\n";
  for (const Alternative& a : report.alternatives) {
    md << "| " << a.gpu << " | " << a.gpus << " | " << a.layout << " | "
       << (a.fits ? fmt("%.3g", 1e3 * a.step_seconds) : "-") << " | " << (a.fits ? fmt("%.0f", a.tokens_per_second) : "-")
       << " | " << (a.fits ? fmt("%.3g", a.gpu_hours_per_billion_tokens) : "-") << " |\n";
  }
  return md.str();
}

std::string report_json(const RunReport& report) {
  nlohmann::json ranks = nlohmann::json::array(), alternatives = nlohmann::json::array();
  for (const RankSummary& r : report.ranks) {
    nlohmann::json phases = nlohmann::json::object();
    for (Phase p : all_phases) phases[std::string(phase_name(p))] = r.phases[p];
    nlohmann::json rank = {{"rank", r.rank}, {"step_seconds", r.step_seconds}, {"phase_seconds", phases},
                           {"memory_peak_bytes", r.memory_peak_bytes}, {"memory_capacity_bytes", r.memory_capacity_bytes}};
    if (r.gpu) {
      rank["gpu"] = {{"samples", r.gpu->samples}, {"utilization_mean_percent", r.gpu->utilization_mean},
                     {"utilization_p95_percent", r.gpu->utilization_p95}, {"memory_used_max_bytes", r.gpu->memory_used_max},
                     {"memory_total_bytes", r.gpu->memory_total}, {"power_mean_watts", r.gpu->power_mean_watts}};
    }
    ranks.push_back(rank);
  }
  for (const Alternative& a : report.alternatives) {
    alternatives.push_back({{"gpu", a.gpu}, {"gpus", a.gpus}, {"layout", a.layout}, {"fits", a.fits},
                            {"step_seconds", a.step_seconds}, {"tokens_per_second", a.tokens_per_second},
                            {"gpu_hours_per_billion_tokens", a.gpu_hours_per_billion_tokens}});
  }
  const nlohmann::json out = {{"job", report.job},
                              {"device", report.device},
                              {"steps", report.steps},
                              {"tokens_per_second", report.tokens_per_second},
                              {"mfu", report.mfu ? nlohmann::json(*report.mfu) : nlohmann::json(nullptr)},
                              {"communication_share", report.communication_share()},
                              {"slowest_rank", report.slowest_rank()},
                              {"ranks", ranks},
                              {"alternatives_basis", report.alternatives_basis},
                              {"alternatives", alternatives}};
  return out.dump(2);
}

void write_report(const std::string& path, const RunReport& report) {
  io::write_file_atomically(path, report_markdown(report));
  io::write_file_atomically(path + ".json", report_json(report) + "\n");
}

}  // namespace loom::telemetry
