// allreduce_bench: loom's collectives with the flags and columns of nccl-tests, and the backend's
// raw call on the same buffers in the same run, so that loom's overhead is a printed ratio.
//   mpirun -np 2 build/benchmarks/allreduce_bench -b 8 -e 64M -f 4     (CPU: MPI backend)
//   mpirun -np 2 build/benchmarks/allreduce_bench --collective all      (a table per collective)
//   build/benchmarks/allreduce_bench -b 1K -e 1G -f 2                 (one GPU: NCCL backend)
//   mpirun -np 2 build/benchmarks/allreduce_bench --gloo               (loom on MPI, then on Gloo)
// time is the per-call time (median over rounds of the mean over -n calls; the slowest rank); the
// raw columns time the backend's own call on the same buffers, out of place and in place, in rounds
// alternating with loom's, and loom/raw is loom's time over raw's (below 1: loom is faster);
// algbw = size / time, busbw = algbw x 2(n-1)/n for all_reduce and x (n-1)/n for reduce_scatter
// and all_gather; size is the full buffer (all ranks' blocks for reduce_scatter/all_gather).
// #wrong counts elements that differ from the exact result of crafted inputs (-c 1). root is
// nccl-tests' column: -1, as these collectives have none.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_report.hpp"
#include "loom/loom.hpp"
#include "raw_collective.hpp"

namespace {

constexpr int no_root = -1;  // nccl-tests' root column for collectives without a root

using loom::DType;
using loom::Tensor;
using loom::comm::Communicator;
using loom::comm::ReduceOp;

std::int64_t parse_bytes(const std::string& text) {
  std::size_t end = 0;
  double value = 0;
  try {
    value = std::stod(text, &end);
  } catch (const std::exception&) {
    loom::fail(loom::ErrorCategory::invalid_argument, "allreduce_bench: bad size '", text, "' (a number with K, M or G)");
  }
  const std::string unit = text.substr(end);
  double scale = 1;
  if (unit == "K" || unit == "k") scale = 1024;
  else if (unit == "M" || unit == "m") scale = 1024.0 * 1024;
  else if (unit == "G" || unit == "g") scale = 1024.0 * 1024 * 1024;
  else loom::require(unit.empty(), "allreduce_bench: bad size '", text, "' (a number with K, M or G)");
  return static_cast<std::int64_t>(value * scale);
}

ReduceOp parse_op(const std::string& name) {
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min}) {
    if (loom::comm::to_string(op) == name) return op;
  }
  loom::fail(loom::ErrorCategory::invalid_argument, "allreduce_bench: unknown op '", name, "' (sum, avg, max, min)");
}

// The buffers of one collective: out of place, and in place (the layout NCCL requires).
struct Buffers {
  Tensor input, output, in_place_input, in_place_output;
};

Buffers make_buffers(const std::string& collective, std::int64_t count, int rank, int size, DType dtype,
                     loom::Device device) {
  const std::int64_t block = count / size;
  Buffers b;
  if (collective == "all_reduce") {
    b.input = Tensor::zeros({count}, dtype, device);
    b.output = Tensor::zeros({count}, dtype, device);
    b.in_place_input = b.in_place_output = Tensor::zeros({count}, dtype, device);
  } else if (collective == "reduce_scatter") {
    b.input = Tensor::zeros({count}, dtype, device);
    b.output = Tensor::zeros({block}, dtype, device);
    b.in_place_input = Tensor::zeros({count}, dtype, device);
    b.in_place_output = b.in_place_input.slice(rank * block, (rank + 1) * block);
  } else {
    b.input = Tensor::zeros({block}, dtype, device);
    b.output = Tensor::zeros({count}, dtype, device);
    b.in_place_output = Tensor::zeros({count}, dtype, device);
    b.in_place_input = b.in_place_output.slice(rank * block, (rank + 1) * block);
  }
  return b;
}

loom::comm::Work call(Communicator& comm, const std::string& collective, const Tensor& in, const Tensor& out,
                      ReduceOp op) {
  if (collective == "all_reduce") return comm.all_reduce(in, out, op);
  if (collective == "reduce_scatter") return comm.reduce_scatter(in, out, op);
  return comm.all_gather(in, out);
}

// Rank r's element i, and the exact result at element i of the collective's output.
double value(int rank, std::int64_t i) { return (rank + 1) * static_cast<double>(i % 5 + 1); }
double expected(const std::string& collective, ReduceOp op, int rank, int size, std::int64_t block, std::int64_t i) {
  if (collective == "all_gather") return value(static_cast<int>(i / block), i % block);
  const std::int64_t at = collective == "reduce_scatter" ? rank * block + i : i;
  const double base = static_cast<double>(at % 5 + 1);
  switch (op) {
    case ReduceOp::sum: return base * size * (size + 1) / 2;
    case ReduceOp::avg: return base * (size + 1) / 2.0;
    case ReduceOp::max: return base * size;
    case ReduceOp::min: return base;
  }
  return 0;
}

// Elements of out that differ from the exact result after one call on crafted inputs, summed over ranks.
std::int64_t count_wrong(Communicator& comm, const std::string& collective, const Tensor& in, const Tensor& out,
                         ReduceOp op, std::int64_t block) {
  std::vector<double> crafted(static_cast<std::size_t>(in.numel()));
  for (std::int64_t i = 0; i < in.numel(); ++i) crafted[static_cast<std::size_t>(i)] = value(comm.rank(), i);
  loom::copy(in, loom::from_doubles(crafted, in.dtype(), in.device()));
  call(comm, collective, in, out, op).wait();
  const std::vector<double> got = loom::to_doubles(out);
  std::int64_t wrong = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] != expected(collective, op, comm.rank(), comm.size(), block, static_cast<std::int64_t>(i))) ++wrong;
  }
  const Tensor total = Tensor::full({1}, DType::i64, static_cast<double>(wrong), comm.device());
  comm.all_reduce(total, total, ReduceOp::sum).wait();
  return total.item<std::int64_t>();
}

// Per-call seconds of `calls` back-to-back calls, on the slowest rank. One untimed call first:
// loom's and the raw rounds alternate on the same buffers, and neither should be timed on buffers
// the other has just brought into cache.
double slowest_per_call(Communicator& comm, const std::function<void()>& sync, const std::function<void()>& one,
                        int calls) {
  one();
  sync();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) one();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / calls;
  const Tensor slowest = Tensor::full({1}, DType::f32, seconds, comm.device());
  comm.all_reduce(slowest, slowest, ReduceOp::max).wait();
  return slowest.item<float>();
}

struct Settings {
  std::string collective = "all_reduce", type = "float", op = "sum", min_bytes = "8", max_bytes = "64M", json;
  std::string algo = "flat", simulate;
  bool gloo = false;
  double factor = 2;
  int iterations = 20, warmup = 5, check = 1, rounds = 5;
};

// The table's smallest and largest sizes in bytes, checked: 0 < min <= max (factor > 1 is checked
// by the option), so the table has at least one row and ends.
std::pair<std::int64_t, std::int64_t> size_range(const Settings& s) {
  const std::int64_t smallest = parse_bytes(s.min_bytes), largest = parse_bytes(s.max_bytes);
  loom::require(smallest > 0, "allreduce_bench: -b/--minbytes must be positive, got '", s.min_bytes, "'");
  loom::require(largest >= smallest, "allreduce_bench: -e/--maxbytes '", s.max_bytes, "' is below -b/--minbytes '",
                s.min_bytes, "': the table would be empty");
  return {smallest, largest};
}

// --simulate: the cost model's predictions for a topology file, in the benchmark's columns.
int simulate(const Settings& s) {
  loom::require(s.collective != "all", "allreduce_bench: --simulate takes one --collective, not all");
  const auto [smallest, largest] = size_range(s);
  const loom::topo::Topology topology = loom::topo::load_topology(s.simulate);
  const loom::topo::Planner planner(topology);
  const loom::topo::Collective collective = s.collective == "all_reduce"       ? loom::topo::Collective::all_reduce
                                            : s.collective == "reduce_scatter" ? loom::topo::Collective::reduce_scatter
                                                                               : loom::topo::Collective::all_gather;
  const loom::topo::AlgorithmChoice choice = loom::topo::parse_algorithm_choice(s.algo);
  const int n = topology.world_size();
  const auto element = static_cast<std::int64_t>(loom::dtype_size(loom::parse_dtype(s.type)));
  std::printf("# loom allreduce_bench --simulate %s: %s, %d rank(s), predicted by the cost model (--algo %s)\n",
              s.simulate.c_str(), s.collective.c_str(), n, s.algo.c_str());
  std::printf("#%11s %12s %8s %6s %6s %9s %8s %8s %7s\n", "size", "count", "type", "redop", "root", "time", "algbw", "busbw",
              "algo");
  std::printf("#%11s %12s %8s %6s %6s %9s %8s %8s %7s\n", "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "");
  for (double wanted = static_cast<double>(smallest); wanted <= static_cast<double>(largest) * 1.0000001;
       wanted *= s.factor) {
    const std::int64_t count = std::max<std::int64_t>(1, static_cast<std::int64_t>(wanted) / element / n) * n;
    const std::int64_t bytes = count * element;
    loom::topo::Plan plan = planner.choose(collective, bytes);
    if (choice != loom::topo::AlgorithmChoice::automatic) {
      const bool hier = choice == loom::topo::AlgorithmChoice::hierarchical;
      loom::require(!hier || planner.model().available(loom::topo::Algorithm::hierarchical),
                    "--algo hier: the topology has no hosts with several ranks to be hierarchical about");
      const loom::topo::Algorithm algorithm = hier ? loom::topo::Algorithm::hierarchical : loom::topo::Algorithm::ring;
      plan = {algorithm, planner.model().predict(collective, algorithm, bytes)};
    }
    std::printf(" %11lld %12lld %8s %6s %6d %9.2f %8.3f %8.3f %7s\n", static_cast<long long>(bytes),
                static_cast<long long>(count), s.type.c_str(), s.collective == "all_gather" ? "-" : s.op.c_str(), no_root,
                plan.prediction.seconds * 1e6, plan.prediction.algbw_gbps, plan.prediction.busbw_gbps,
                loom::topo::to_string(plan.algorithm).c_str());
  }
  return 0;
}

// One table: every size of one collective, loom (on `comm`, whatever its backend) against the raw
// call of the world's; its JSON rows.
nlohmann::json run_table(const Settings& s, const std::string& collective, std::int64_t smallest, std::int64_t largest,
                         Communicator& comm, const loom::World& world, loom::bench::RawCollective* raw) {
  const DType dtype = loom::parse_dtype(s.type);  // nccl-tests' names (float, half, bfloat16, ...) are aliases
  const ReduceOp op = collective == "all_gather" ? ReduceOp::sum : parse_op(s.op);
  const int n = comm.size(), rank = comm.rank();
  const double bus_factor = collective == "all_reduce" ? 2.0 * (n - 1) / n : static_cast<double>(n - 1) / n;
  const auto element = static_cast<std::int64_t>(loom::dtype_size(dtype));
  const bool lead = rank == 0;
  if (lead) {
    std::printf("# loom allreduce_bench: %s, %d rank(s), backend %s on %s, --algo %s, raw baseline %s\n",
                collective.c_str(), n, std::string(comm.backend()).c_str(), world.device().to_string().c_str(),
                s.algo.c_str(), raw ? raw->name().c_str() : "none");
    std::printf("#%58s%34s%34s%38s\n", "", "out-of-place", "in-place", "raw backend (out / in place)");
    std::printf("#%11s %12s %8s %6s %6s %9s %8s %8s %7s %9s %8s %8s %7s %9s %9s %9s %9s\n", "size", "count", "type",
                "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong", "time", "time",
                "loom/raw", "loom/raw");
    std::printf("#%11s %12s %8s %6s %6s %9s %8s %8s %7s %9s %8s %8s %7s %9s %9s %9s %9s\n", "(B)", "(elements)", "", "",
                "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)", "out", "in");
  }
  nlohmann::json rows = nlohmann::json::array();
  for (double bytes_wanted = static_cast<double>(smallest); bytes_wanted <= static_cast<double>(largest) * 1.0000001;
       bytes_wanted *= s.factor) {
    // Whole elements, and a whole number of them per rank.
    const std::int64_t block = std::max<std::int64_t>(1, static_cast<std::int64_t>(bytes_wanted) / element / n);
    const std::int64_t count = block * n, bytes = count * element;
    const Buffers b = make_buffers(collective, count, rank, n, dtype, world.device());
    auto loom_call = [&](const Tensor& in, const Tensor& out) { call(comm, collective, in, out, op).wait(); };
    const auto sync = [&] { comm.barrier().wait(); };
    const bool has_raw = raw && raw->run(collective, b.input, b.output, op);
    for (int i = 0; i < s.warmup; ++i) loom_call(b.input, b.output);
    std::vector<double> outside, inside, direct, direct_in_place;
    const auto raw_sync = [&] { raw->barrier(); };
    for (int round = 0; round < s.rounds; ++round) {  // loom and raw alternate, in the same buffers
      outside.push_back(slowest_per_call(comm, sync, [&] { loom_call(b.input, b.output); }, s.iterations));
      if (has_raw) {
        direct.push_back(slowest_per_call(
            comm, raw_sync, [&] { raw->run(collective, b.input, b.output, op); }, s.iterations));
      }
      inside.push_back(
          slowest_per_call(comm, sync, [&] { loom_call(b.in_place_input, b.in_place_output); }, s.iterations));
      if (has_raw) {
        direct_in_place.push_back(slowest_per_call(
            comm, raw_sync, [&] { raw->run(collective, b.in_place_input, b.in_place_output, op); }, s.iterations));
      }
    }
    const double t_out = loom::bench::median(outside), t_in = loom::bench::median(inside);
    const double t_raw = has_raw ? loom::bench::median(direct) : 0;
    const double t_raw_in = has_raw ? loom::bench::median(direct_in_place) : 0;
    const std::int64_t wrong_out = s.check ? count_wrong(comm, collective, b.input, b.output, op, block) : -1;
    const std::int64_t wrong_in =
        s.check ? count_wrong(comm, collective, b.in_place_input, b.in_place_output, op, block) : -1;
    const auto gbps = [&](double t) { return static_cast<double>(bytes) / t / 1e9; };
    if (lead) {
      std::printf(" %11lld %12lld %8s %6s %6d %9.2f %8.3f %8.3f %7lld %9.2f %8.3f %8.3f %7lld",
                  static_cast<long long>(bytes), static_cast<long long>(count), s.type.c_str(),
                  std::string(loom::comm::to_string(op)).c_str(), no_root, t_out * 1e6, gbps(t_out), gbps(t_out) * bus_factor, static_cast<long long>(wrong_out), t_in * 1e6,
                  gbps(t_in), gbps(t_in) * bus_factor, static_cast<long long>(wrong_in));
      if (has_raw) std::printf(" %9.2f %9.2f %9.3f %9.3f\n", t_raw * 1e6, t_raw_in * 1e6, t_out / t_raw, t_in / t_raw_in);
      else std::printf(" %9s %9s %9s %9s\n", "-", "-", "-", "-");
    }
    nlohmann::json row = {{"collective", collective},
                          {"size_bytes", bytes},
                          {"count", count},
                          {"type", s.type},
                          {"redop", loom::comm::to_string(op)},
                          {"root", no_root},
                          {"out_of_place", {{"time_us", t_out * 1e6}, {"algbw_gbps", gbps(t_out)},
                                            {"busbw_gbps", gbps(t_out) * bus_factor}, {"wrong", wrong_out}}},
                          {"in_place", {{"time_us", t_in * 1e6}, {"algbw_gbps", gbps(t_in)},
                                        {"busbw_gbps", gbps(t_in) * bus_factor}, {"wrong", wrong_in}}}};
    if (has_raw) {
      row["raw"] = {{"time_us", t_raw * 1e6}, {"loom_over_raw", t_out / t_raw}, {"added_us", (t_out - t_raw) * 1e6},
                    {"in_place_time_us", t_raw_in * 1e6}, {"in_place_loom_over_raw", t_in / t_raw_in}};
    }
    rows.push_back(row);
  }
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const loom::InitOptions init = loom::parse_init_flags(argc, argv);
    CLI::App app("allreduce_bench: loom collectives in nccl-tests' format, against the backend's raw call");
    Settings s;
    app.add_option("--collective", s.collective, "all_reduce, reduce_scatter, all_gather, or all (a table of each)")
        ->check(CLI::IsMember({"all_reduce", "reduce_scatter", "all_gather", "all"}));
    app.add_option("-b,--minbytes", s.min_bytes, "smallest size (bytes, K, M, G)");
    app.add_option("-e,--maxbytes", s.max_bytes, "largest size");
    app.add_option("-f,--stepfactor", s.factor, "size multiplier between rows")->check(CLI::Range(1.01, 1e6));
    app.add_option("-n,--iters", s.iterations, "timed calls per round")->check(CLI::PositiveNumber);
    app.add_option("-w,--warmup_iters", s.warmup, "untimed calls before timing")->check(CLI::NonNegativeNumber);
    app.add_option("-c,--check", s.check, "count wrong elements on crafted inputs (0 or 1)");
    app.add_option("-d,--datatype", s.type, "float, half, bfloat16, int32, int64");
    app.add_option("-o,--op", s.op, "sum, avg, max, min");
    app.add_option("--rounds", s.rounds, "rounds (loom and raw alternate); the median is reported")
        ->check(CLI::PositiveNumber);
    app.add_option("--json", s.json, "write the JSON record here (rank 0)");
    app.add_option("--algo", s.algo, "flat (the backend's call), hier (loom's hierarchical schedule) or auto (the "
                   "planner's choice per size), from the detected topology or LOOM_TOPO_FILE")
        ->check(CLI::IsMember({"flat", "hier", "auto"}));
    app.add_option("--simulate", s.simulate, "print the cost model's predictions for this topology file and exit");
    app.add_flag("--gloo", s.gloo, "also run every table on a Gloo communicator beside the world's (its addresses "
                  "exchanged through the world), against the same raw baseline");
    CLI11_PARSE(app, argc, argv);
    const auto [smallest, largest] = size_range(s);  // before any rank starts communicating
    if (!s.simulate.empty()) return simulate(s);
    std::unique_ptr<loom::World> world = loom::init(argc, argv, init);
    std::unique_ptr<Communicator> aware;  // --algo hier/auto: collectives through the topology
    if (s.algo != "flat") {
      aware = loom::topo::make_topology_aware(world->comm(), loom::topo::detect_topology(&world->comm()).topology,
                                              loom::topo::parse_algorithm_choice(s.algo));
    }
    Communicator& comm = aware ? *aware : world->comm();

    std::unique_ptr<loom::bench::RawCollective> raw = loom::bench::make_raw_collective(*world);
    const int n = comm.size();
    const bool lead = comm.rank() == 0;
    const std::vector<std::string> collectives =
        s.collective == "all" ? std::vector<std::string>{"all_reduce", "reduce_scatter", "all_gather"}
                              : std::vector<std::string>{s.collective};
    nlohmann::json rows = nlohmann::json::array();
    std::unique_ptr<Communicator> gloo;
    if (s.gloo) {
      loom::require(loom::comm::gloo_built(), "allreduce_bench: --gloo needs a loom built with Gloo (libgloo-dev)");
      loom::require(world->device().is_cpu(), "allreduce_bench: --gloo moves CPU tensors; run with --loom-device cpu");
      Communicator& through = world->comm();
      const loom::comm::BlobExchange exchange = [&](std::span<const unsigned char> mine) {
        std::vector<std::vector<unsigned char>> blobs;
        for (const std::string& text : loom::comm::all_gather_texts(through, std::string(mine.begin(), mine.end())))
          blobs.emplace_back(text.begin(), text.end());
        return blobs;
      };
      gloo = loom::comm::make_gloo_communicator(through.rank(), through.size(), exchange,
                                                loom::comm::gloo_options_from_environment(true));
    }
    for (const std::string& collective : collectives) {
      for (auto& row : run_table(s, collective, smallest, largest, comm, *world, raw.get())) {
        row["backend"] = comm.backend();
        rows.push_back(row);
      }
      if (!gloo) continue;
      for (auto& row : run_table(s, collective, smallest, largest, *gloo, *world, raw.get())) {
        row["backend"] = "gloo";
        rows.push_back(row);
      }
    }
    if (lead && !s.json.empty()) {
      nlohmann::json record = loom::bench::make_record(
          "allreduce_bench", {{"collective", s.collective}, {"ranks", n}, {"backend", comm.backend()},
                              {"device", world->device().to_string()}, {"raw", raw ? raw->name() : "none"},
                              {"iterations", s.iterations}, {"warmup", s.warmup}, {"rounds", s.rounds},
                              {"launcher", world->launch().launcher}, {"algo", s.algo}});
      record["rows"] = rows;
      loom::bench::write_json(s.json, record);
      std::printf("# wrote %s\n", s.json.c_str());
    }
    std::int64_t total_wrong = 0;
    for (const auto& row : rows) {
      total_wrong += std::max<std::int64_t>(0, row["out_of_place"]["wrong"].get<std::int64_t>()) +
                     std::max<std::int64_t>(0, row["in_place"]["wrong"].get<std::int64_t>());
    }
    if (lead) std::printf("# Out of bounds values : %lld %s\n", static_cast<long long>(total_wrong), total_wrong ? "FAILED" : "OK");
    return total_wrong == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "allreduce_bench: %s\n", e.what());
    return 1;
  }
}
