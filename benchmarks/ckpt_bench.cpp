// ckpt_bench: what saving and loading a checkpoint costs, per rank count. For a GPT of about 50 M
// parameters with AdamW under ZeRO-1 it times, at each rank count (one mpirun job each):
//   sharded save       every rank writes its own pieces (loom-checkpoint-2, the default)
//   consolidated save  the state gathered to rank 0, which writes whole tensors (loom-checkpoint-1)
//   the loads of both
//   asynchronous save  io::CheckpointWriter::save_async (what train_gpt --async-save calls): the
//                      time training is blocked (the copy of each rank's part to host memory), and
//                      the time until the background write has committed; against the same
//                      writer's synchronous save (issue 27's target: blocked <= 10% of it). The
//                      first asynchronous save also allocates the host buffer: reported apart.
//   encrypted save     the sharded save with a key (io/at_rest.hpp: every file in loom's encrypted
//                      format), and its load, against plain ones (issue 32's target: an encrypted
//                      save <= 1.2x the plain one). The disk of a cloud VM drifts by 2x over a
//                      minute, so each encrypted save and load is paired with a plain one right
//                      next to it, in alternating order, and the ratio is the median of the pairs'.
//   disk               the same-run baseline: every rank writes, at the same time, as many bytes as
//                      its sharded file, in 4 MiB blocks, then fsyncs: what the disk gives
// Each is the median over --repeats, the slowest rank's time. The table gives the write bandwidth
// of the sharded save against the disk baseline (issue 27's target: >= 0.7) and each rank's peak
// resident memory (getrusage).
//
//   build/benchmarks/ckpt_bench --json ckpt.json        # launches mpirun -np 1, 2, 4 itself
#include <CLI/CLI.hpp>

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <functional>
#include <random>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_report.hpp"
#include "loom/comm/agreement.hpp"
#include "loom/comm/launch.hpp"
#include "loom/comm/mpi.hpp"
#include "loom/core/build_info.hpp"
#include "loom/core/error.hpp"
#include "loom/crypt/key.hpp"
#include "loom/io/at_rest.hpp"
#include "loom/io/checkpoint_writer.hpp"
#include "loom/loom.hpp"
#include "loom/train/trainer.hpp"
#include "repeat_batch.hpp"
#include "self_launch.hpp"

namespace fs = std::filesystem;

namespace {

struct Options {
  std::vector<int> ranks{1, 2, 4};
  int cores = static_cast<int>(std::thread::hardware_concurrency());
  int repeats = 3;
  std::int64_t layers = 4, channels = 768, vocab = 32768;
  std::string dir = "/tmp/loom_ckpt_bench", json_path, worker_json;
  bool worker = false;
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The slowest rank's time for fn, all ranks starting together.
double timed(loom::comm::Communicator& comm, const std::function<void()>& fn) {
  comm.barrier().wait();
  const auto start = std::chrono::steady_clock::now();
  fn();
  const double mine = seconds_since(start);
  const auto micros = loom::comm::all_reduce_values(comm, {static_cast<std::int64_t>(mine * 1e6)}, loom::comm::ReduceOp::max);
  return static_cast<double>(micros[0]) / 1e6;
}

// Writes `bytes` to path in 4 MiB blocks and fsyncs it.
void write_raw(const std::string& path, std::int64_t bytes) {
  const std::vector<char> block(std::size_t{4} << 20, 'x');
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  loom::require(fd >= 0, "ckpt_bench: cannot create ", path);
  for (std::int64_t left = bytes; left > 0;) {
    const auto n = static_cast<std::size_t>(std::min<std::int64_t>(left, static_cast<std::int64_t>(block.size())));
    loom::require(::write(fd, block.data(), n) == static_cast<ssize_t>(n), "ckpt_bench: cannot write ", path);
    left -= static_cast<std::int64_t>(n);
  }
  ::fsync(fd);
  ::close(fd);
}

int run_worker(const Options& o, loom::InitOptions init, int argc, char** argv) {
  const std::unique_ptr<loom::World> world = loom::init(argc, argv, init);
  loom::comm::Communicator& comm = world->comm();
  const loom::nn::GPTConfig config{.vocab_size = o.vocab, .context = 128, .layers = o.layers, .heads = 12,
                                   .channels = o.channels};
  loom::nn::GPT model(config, loom::nn::Precision::fp32(), world->device(), 5, loom::shard::space_layout(1, &comm));
  std::mt19937 rng(1);
  loom::bench::RepeatBatch data(loom::bench::random_batch(1, 16, config.vocab_size, rng), config.vocab_size);
  loom::train::TrainerOptions options;
  options.schedule.total = 10;
  options.zero = 1;
  loom::train::Trainer trainer(model, data, options, &comm);
  const std::string root = (fs::path(o.dir) / ("np" + std::to_string(comm.size()))).string();
  if (comm.rank() == 0) {
    fs::remove_all(root);
    fs::create_directories(root);
  }
  comm.barrier().wait();
  const loom::io::TrainingProgress progress = trainer.progress();
  auto save = [&](loom::io::CheckpointLayout layout, const std::string& run) {
    return loom::io::save_checkpoint(root + "/" + run, model, trainer.optimizer(), progress, &comm, layout);
  };
  std::vector<double> sharded_save, consolidated_save, sharded_load, consolidated_load, disk, writer_save, async_blocked,
      async_total, sealed_save, sealed_load, sealed_async_blocked, sealed_async_total, paired_save, paired_load,
      save_ratio, load_ratio;
  // Every rank the same key (a job shares one key file).
  std::vector<std::int64_t> key_bytes(loom::crypt::key_bytes);
  if (comm.rank() == 0) {
    std::random_device random;
    for (std::int64_t& b : key_bytes) b = random() & 0xff;
  }
  key_bytes = loom::comm::broadcast_values(comm, key_bytes, 0);
  std::array<unsigned char, loom::crypt::key_bytes> raw_key{};
  for (std::size_t i = 0; i < raw_key.size(); ++i) raw_key[i] = static_cast<unsigned char>(key_bytes[i]);
  const auto key = std::make_shared<const loom::crypt::SecretKey>(loom::crypt::SecretKey::from_bytes(raw_key));
  std::string sharded_dir, consolidated_dir;
  loom::io::CheckpointWriter writer(model, trainer.optimizer(), &comm);
  double first_blocked = 0;
  for (int r = 0; r < o.repeats + 1; ++r) {
    // Training is blocked for the save_async call; the write goes on until wait() returns.
    double blocked = 0;
    const double total = timed(comm, [&] {
      blocked = timed(comm, [&] { writer.save_async(root + "/async", progress); });
      writer.wait();
    });
    if (r == 0) {
      first_blocked = blocked;  // allocates the host copy: apart from the steady state
      continue;
    }
    async_blocked.push_back(blocked);
    async_total.push_back(total);
    writer_save.push_back(timed(comm, [&] { writer.save(root + "/writer", progress); }));
  }
  for (int r = 0; r < o.repeats; ++r) {
    sharded_save.push_back(timed(comm, [&] { sharded_dir = save(loom::io::CheckpointLayout::sharded, "sharded"); }));
    consolidated_save.push_back(
        timed(comm, [&] { consolidated_dir = save(loom::io::CheckpointLayout::consolidated, "consolidated"); }));
    char name[40];
    std::snprintf(name, sizeof(name), "rank_%05d.safetensors", comm.rank());
    const auto mine = static_cast<std::int64_t>(fs::file_size(fs::path(sharded_dir) / name));
    const std::string raw = root + "/raw_" + std::to_string(comm.rank());
    disk.push_back(timed(comm, [&] { write_raw(raw, mine); }));
    fs::remove(raw);
    sharded_load.push_back(timed(comm, [&] { loom::io::load_checkpoint(sharded_dir, model, trainer.optimizer()); }));
    consolidated_load.push_back(
        timed(comm, [&] { loom::io::load_checkpoint(consolidated_dir, model, trainer.optimizer()); }));
    std::string sealed_dir, paired_dir;
    const auto plain_pair = [&] {
      paired_save.push_back(timed(comm, [&] { paired_dir = save(loom::io::CheckpointLayout::sharded, "paired"); }));
      paired_load.push_back(timed(comm, [&] { loom::io::load_checkpoint(paired_dir, model, trainer.optimizer()); }));
    };
    const auto encrypted = [&] {
      loom::io::set_at_rest_key(key);
      sealed_save.push_back(timed(comm, [&] { sealed_dir = save(loom::io::CheckpointLayout::sharded, "encrypted"); }));
      sealed_load.push_back(timed(comm, [&] { loom::io::load_checkpoint(sealed_dir, model, trainer.optimizer()); }));
      loom::io::set_at_rest_key(nullptr);
    };
    if (r % 2 == 0) {
      plain_pair();
      encrypted();
    } else {
      encrypted();
      plain_pair();
    }
    save_ratio.push_back(sealed_save.back() / paired_save.back());
    load_ratio.push_back(sealed_load.back() / paired_load.back());
    loom::io::set_at_rest_key(key);
    // In the background, training is blocked only for the copy to host memory; the encryption is
    // in the writer's thread.
    double blocked = 0;
    sealed_async_total.push_back(timed(comm, [&] {
      blocked = timed(comm, [&] { writer.save_async(root + "/encrypted_async", progress); });
      writer.wait();
    }));
    sealed_async_blocked.push_back(blocked);
    loom::io::set_at_rest_key(nullptr);
  }
  std::int64_t bytes = 0;
  for (const auto& entry : fs::directory_iterator(sharded_dir)) {
    if (entry.path().extension() == ".safetensors") bytes += static_cast<std::int64_t>(entry.file_size());
  }
  struct rusage usage {};
  ::getrusage(RUSAGE_SELF, &usage);
  const auto peak = loom::comm::all_reduce_values(comm, {static_cast<std::int64_t>(usage.ru_maxrss)}, loom::comm::ReduceOp::max);
  const double save_s = loom::bench::median(sharded_save), disk_s = loom::bench::median(disk);
  const nlohmann::json row = {{"ranks", comm.size()},
                              {"parameters", model.parameter_space().parameter_elements()},
                              {"checkpoint_bytes", bytes},
                              {"sharded_save_s", save_s},
                              {"consolidated_save_s", loom::bench::median(consolidated_save)},
                              {"sharded_load_s", loom::bench::median(sharded_load)},
                              {"consolidated_load_s", loom::bench::median(consolidated_load)},
                              {"disk_s", disk_s},
                              {"write_GBps", static_cast<double>(bytes) / save_s / 1e9},
                              {"disk_GBps", static_cast<double>(bytes) / disk_s / 1e9},
                              {"write_vs_disk", disk_s / save_s},
                              {"writer_save_s", loom::bench::median(writer_save)},
                              {"async_blocked_s", loom::bench::median(async_blocked)},
                              {"async_first_blocked_s", first_blocked},
                              {"async_total_s", loom::bench::median(async_total)},
                              {"async_blocked_vs_sync", loom::bench::median(async_blocked) / loom::bench::median(writer_save)},
                              {"encrypted_save_s", loom::bench::median(sealed_save)},
                              {"encrypted_load_s", loom::bench::median(sealed_load)},
                              {"paired_plain_save_s", loom::bench::median(paired_save)},
                              {"paired_plain_load_s", loom::bench::median(paired_load)},
                              {"encrypted_save_vs_plain", loom::bench::median(save_ratio)},
                              {"encrypted_save_ratios", save_ratio},
                              {"encrypted_async_blocked_s", loom::bench::median(sealed_async_blocked)},
                              {"encrypted_async_total_s", loom::bench::median(sealed_async_total)},
                              {"encrypted_load_vs_plain", loom::bench::median(load_ratio)},
                              {"peak_rss_MiB", static_cast<double>(peak[0]) / 1024.0}};
  if (comm.rank() == 0) {
    fs::remove_all(root);
    if (!o.worker_json.empty()) loom::bench::write_json(o.worker_json, nlohmann::json::array({row}));
    else std::printf("%s\n", row.dump(2).c_str());
  }
  return 0;
}

int run_orchestrator(const Options& o) {
  std::printf("%s\n", loom::to_string(loom::build_info()).c_str());
  std::printf("ckpt_bench: GPT %lld layers x %lld, vocabulary %lld, fp32, AdamW, ZeRO-1; %d repeats (medians, the "
              "slowest rank); checkpoints in %s\n", static_cast<long long>(o.layers), static_cast<long long>(o.channels),
              static_cast<long long>(o.vocab), o.repeats, o.dir.c_str());
  nlohmann::json rows = nlohmann::json::array();
  for (const int ranks : o.ranks) {
    if (!loom::comm::mpi_built() && ranks > 1) continue;
    std::printf("  %d rank(s)...\n", ranks);
    std::ostringstream arguments;
    arguments << "--repeats " << o.repeats << " --layers " << o.layers << " --channels " << o.channels << " --vocab "
              << o.vocab << " --dir " << o.dir;
    for (auto& row : loom::bench::launch_self_job("ckpt_bench", ranks, std::max(1, o.cores / ranks), arguments.str())) {
      rows.push_back(row);
    }
  }
  std::printf("%5s %8s %9s %11s %11s %9s %9s %8s %8s %8s %8s %9s\n", "ranks", "params M", "ckpt MiB", "save shard",
              "save whole", "load shd", "load whl", "disk s", "GB/s", "disk GB/s", "vs disk", "peak MiB");
  for (const auto& r : rows) {
    std::printf("%5d %8.1f %9.1f %10.2fs %10.2fs %8.2fs %8.2fs %7.2fs %8.2f %9.2f %8.2f %9.0f\n", r["ranks"].get<int>(),
                r["parameters"].get<double>() / 1e6, r["checkpoint_bytes"].get<double>() / 1048576.0,
                r["sharded_save_s"].get<double>(), r["consolidated_save_s"].get<double>(),
                r["sharded_load_s"].get<double>(), r["consolidated_load_s"].get<double>(), r["disk_s"].get<double>(),
                r["write_GBps"].get<double>(), r["disk_GBps"].get<double>(), r["write_vs_disk"].get<double>(),
                r["peak_rss_MiB"].get<double>());
  }
  std::printf("\nasynchronous saves (io::CheckpointWriter), the slowest rank, medians:\n");
  std::printf("%5s %10s %13s %12s %14s %15s\n", "ranks", "sync save", "async blocks", "async total", "blocks/sync",
              "first blocks");
  for (const auto& r : rows) {
    std::printf("%5d %9.3fs %12.3fs %11.3fs %13.1f%% %14.3fs\n", r["ranks"].get<int>(), r["writer_save_s"].get<double>(),
                r["async_blocked_s"].get<double>(), r["async_total_s"].get<double>(),
                100.0 * r["async_blocked_vs_sync"].get<double>(), r["async_first_blocked_s"].get<double>());
  }
  std::printf("\nencryption at rest (io/at_rest.hpp), sharded, the slowest rank, medians; each encrypted save and load "
              "is paired with a plain one next to it, ratio = median of the pairs' (target: save <= 1.2x):\n");
  std::printf("%5s %11s %14s %9s %11s %14s %9s %13s %13s\n", "ranks", "plain save", "encrypted save", "ratio",
              "plain load", "encrypted load", "ratio", "async blocks", "async total");
  for (const auto& r : rows) {
    std::printf("%5d %10.3fs %13.3fs %8.2fx %10.3fs %13.3fs %8.2fx %12.3fs %12.3fs\n", r["ranks"].get<int>(),
                r["paired_plain_save_s"].get<double>(), r["encrypted_save_s"].get<double>(),
                r["encrypted_save_vs_plain"].get<double>(), r["paired_plain_load_s"].get<double>(),
                r["encrypted_load_s"].get<double>(), r["encrypted_load_vs_plain"].get<double>(),
                r["encrypted_async_blocked_s"].get<double>(), r["encrypted_async_total_s"].get<double>());
  }
  nlohmann::json record = loom::bench::make_record(
      "ckpt_bench", {{"layers", o.layers}, {"channels", o.channels}, {"vocab", o.vocab}, {"repeats", o.repeats},
                     {"zero", 1}, {"optimizer", "adamw"}, {"precision", "fp32"}, {"dir", o.dir},
                     {"baseline", "every rank writes its sharded file's size in 4 MiB blocks at once, then fsync"}});
  record["rows"] = rows;
  if (!o.json_path.empty()) loom::bench::write_json(o.json_path, record);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("ckpt_bench: sharded and consolidated checkpoint save and load against the disk, per rank count");
  Options o;
  app.add_option("--ranks", o.ranks, "rank counts to launch, e.g. 1,2,4")->delimiter(',');
  app.add_option("--cores", o.cores, "cores to share among each job's ranks")->check(CLI::PositiveNumber);
  app.add_option("--repeats", o.repeats, "saves and loads per layout (medians)")->check(CLI::PositiveNumber);
  app.add_option("--layers", o.layers, "transformer blocks")->check(CLI::PositiveNumber);
  app.add_option("--channels", o.channels, "model width (a multiple of 12)")->check(CLI::PositiveNumber);
  app.add_option("--vocab", o.vocab, "vocabulary")->check(CLI::PositiveNumber);
  app.add_option("--dir", o.dir, "where the checkpoints go (removed after)");
  app.add_option("--json", o.json_path, "write the JSON record here");
  app.add_flag("--worker", o.worker, "measure this job only (what the launched jobs run)");
  app.add_option("--worker-json", o.worker_json, "where a worker writes its rows");
  return loom::bench::self_launching_main(
      "ckpt_bench", app, argc, argv, o.worker,
      [&](const loom::InitOptions& init, int n, char** args) { return run_worker(o, init, n, args); },
      [&] { return run_orchestrator(o); });
}
