// data_bench: does loom's data path keep a GPU fed?
//   1. The streaming loader (ShardBatches through a Prefetcher) in tokens/s, from the page cache
//      and from a cold file (the shards' cached pages dropped with posix_fadvise, which needs no
//      root; mincore says how much was still cached). The same run's baseline is the whole-file
//      reader (read_shard_tokens + TokenBatches), from the page cache. The target is 20x what a
//      GPT-2 124M step on one H200 consumes: 312k tokens/s measured by gpu-check (bf16, B=16,
//      benchmarks/results/h200-2026-12-04), so 6.2M tokens/s.
//   2. The data wait's share of a CPU training step (Trainer on streamed shards), plain and
//      encrypted (io/at_rest.hpp), target <= 1% for both.
//   3. loom-tokenize's encoder against Python tokenizers on the same text and vocabulary, single
//      thread and every core, target >= 1x tokenizers' single thread.
#include <CLI/CLI.hpp>
#include <fcntl.h>
#include <omp.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "bench_report.hpp"
#include "loom/core/error.hpp"
#include "loom/crypt/encrypted_file.hpp"
#include "loom/crypt/key.hpp"
#include "loom/data/bpe_trainer.hpp"
#include "loom/data/prefetcher.hpp"
#include "loom/data/shard_stream.hpp"
#include "loom/data/token_batches.hpp"
#include "loom/data/token_shard.hpp"
#include "loom/io/at_rest.hpp"
#include "loom/io/files.hpp"
#include "loom/nn/gpt.hpp"
#include "loom/train/trainer.hpp"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// `shards` files of `per_shard` tokens (i mod vocab), flushed to disk.
std::vector<std::string> make_shards(const fs::path& dir, int shards, std::int64_t per_shard, int vocab) {
  fs::create_directories(dir);
  std::vector<std::string> paths;
  std::vector<std::uint16_t> chunk(1 << 22);
  for (int s = 0; s < shards; ++s) {
    paths.push_back((dir / ("bench_" + std::to_string(s) + ".bin")).string());
    std::ofstream out(paths.back(), std::ios::binary);
    std::int32_t header[256] = {loom::data::token_shard_magic, loom::data::token_shard_version,
                                static_cast<std::int32_t>(per_shard)};
    out.write(reinterpret_cast<const char*>(header), sizeof header);
    for (std::int64_t at = 0; at < per_shard; at += static_cast<std::int64_t>(chunk.size())) {
      const std::int64_t n = std::min<std::int64_t>(static_cast<std::int64_t>(chunk.size()), per_shard - at);
      for (std::int64_t i = 0; i < n; ++i) chunk[static_cast<std::size_t>(i)] = static_cast<std::uint16_t>((at + i + s) % vocab);
      out.write(reinterpret_cast<const char*>(chunk.data()), static_cast<std::streamsize>(n * 2));
    }
    loom::require(out.good(), loom::ErrorCategory::io, "data_bench: cannot write ", paths.back());
  }
  return paths;
}

// Drops the files' pages from the page cache (fsync first: only clean pages go); returns the
// fraction still cached afterwards (mincore).
double drop_cache(const std::vector<std::string>& paths) {
  std::int64_t pages = 0, cached = 0;
  const long page = sysconf(_SC_PAGESIZE);
  for (const std::string& path : paths) {
    const int fd = ::open(path.c_str(), O_RDONLY);
    loom::require(fd >= 0, loom::ErrorCategory::io, "data_bench: cannot open ", path);
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    const auto size = static_cast<std::size_t>(fs::file_size(path));
    void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    if (map == MAP_FAILED) continue;
    std::vector<unsigned char> resident((size + static_cast<std::size_t>(page) - 1) / static_cast<std::size_t>(page));
    if (::mincore(map, size, resident.data()) == 0) {
      pages += static_cast<std::int64_t>(resident.size());
      for (const unsigned char r : resident) cached += r & 1;
    }
    ::munmap(map, size);
  }
  return pages > 0 ? static_cast<double>(cached) / static_cast<double>(pages) : 1.0;
}

// Tokens/s of `batches` batches from the source (inputs only: what a step consumes).
double loader_rate(loom::data::BatchSource& source, std::int64_t batches) {
  const auto start = Clock::now();
  std::int64_t tokens = 0;
  for (std::int64_t i = 0; i < batches; ++i) tokens += source.next().inputs.numel();
  return static_cast<double>(tokens) / since(start);
}

std::string text_of(const std::vector<std::string>& files, double megabytes) {
  std::string one;
  for (const std::string& f : files) one += loom::io::read_file(f);
  std::string text;
  while (static_cast<double>(text.size()) < megabytes * 1e6) text += one;
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("data_bench: loader tokens/s (warm and cold), the data wait of a step, and tokenizer throughput");
  std::string dir = (fs::temp_directory_path() / "loom_data_bench").string(), json_path;
  std::int64_t shard_tokens = std::int64_t{1} << 26;
  int shards = 2, steps = 30;
  double text_mb = 8;
  app.add_option("--dir", dir, "where the benchmark's shards and vocabulary are made (removed at the end)");
  app.add_option("--shard-tokens", shard_tokens, "tokens per shard (2 shards)")->check(CLI::PositiveNumber);
  app.add_option("--steps", steps, "timed training steps for the data-wait share")->check(CLI::PositiveNumber);
  app.add_option("--text-mb", text_mb, "MB of text to tokenize (this repository's docs, repeated)")
      ->check(CLI::PositiveNumber);
  app.add_option("--json", json_path, "write the JSON record here");
  CLI11_PARSE(app, argc, argv);
  try {
    const fs::path root(dir);
    fs::remove_all(root);
    const double h200_tokens_per_s = 312e3, target = 20 * h200_tokens_per_s;
    nlohmann::json record = loom::bench::make_record(
        "data_bench", {{"shard_tokens", shard_tokens}, {"shards", shards}, {"steps", steps}, {"text_mb", text_mb},
                       {"threads", std::thread::hardware_concurrency()}, {"h200_gpt2_tokens_per_s", h200_tokens_per_s}});
    const nlohmann::json cpu = loom::bench::cpu_description();
    std::printf("CPU %s, %u cores\n\n", cpu["model"].get<std::string>().c_str(), std::thread::hardware_concurrency());

    // 1. The loader.
    const std::vector<std::string> paths = make_shards(root / "shards", shards, shard_tokens, 50257);
    const loom::data::ShardSet set(paths);
    const std::int64_t B = 16, T = 1024;
    const loom::data::ShardBatchesOptions options{.batch = B, .steps = T, .vocab_size = 50257, .seed = 1};
    const std::int64_t batches = set.windows(T) / B;  // one epoch
    const auto streamed = [&] {
      loom::data::Prefetcher loader(std::make_unique<loom::data::ShardBatches>(set, options), 2);
      return loader_rate(loader, batches);
    };
    const double warm = streamed();
    const double cached_before_cold = drop_cache(paths);
    const double cold = streamed();
    const auto whole_start = Clock::now();
    loom::data::TokenBatches whole(loom::data::read_shard_tokens(paths), 50257, B, T);
    const double whole_load = since(whole_start);
    const double whole_rate = loader_rate(whole, batches);
    const double whole_with_load =
        static_cast<double>(batches * B * T) / (whole_load + static_cast<double>(batches * B * T) / whole_rate);
    std::printf("%-44s %14s %10s\n", "loader (B 16, T 1024, 2 shards)", "tokens/s", "vs target");
    std::printf("%-44s %14.0f %9.1fx\n", "streamed, page cache", warm, warm / target);
    std::printf("%-44s %14.0f %9.1fx   (%.0f%% cached at the start)\n", "streamed, cold (pages dropped)", cold,
                cold / target, 100 * cached_before_cold);
    std::printf("%-44s %14.0f %9.1fx   (after %.2f s reading it all in)\n", "whole-file reader (baseline), page cache",
                whole_rate, whole_rate / target, whole_load);
    std::printf("target: 20 x %.0f tokens/s (GPT-2 124M, one H200, bf16, B=16) = %.0f tokens/s\n\n",
                h200_tokens_per_s, target);
    record["rows"].push_back({{"case", "streamed_warm"}, {"tokens_per_s", warm}, {"vs_target", warm / target}});
    record["rows"].push_back({{"case", "streamed_cold"}, {"tokens_per_s", cold}, {"vs_target", cold / target},
                              {"cached_fraction_at_start", cached_before_cold}});
    record["rows"].push_back({{"case", "whole_file_warm"}, {"tokens_per_s", whole_rate}, {"load_seconds", whole_load},
                              {"tokens_per_s_with_load", whole_with_load}});

    // 2. The data wait of a CPU step (train_bench's default model, vocabulary 4096), on plain
    // shards and on the same shards encrypted (io/at_rest.hpp: each decrypted whole in the
    // loader's thread when the stream reaches it; 4 shards, so the measured steps cross shards).
    {
      const std::vector<std::string> small = make_shards(root / "train", 4, std::int64_t{1} << 15, 4096);
      const auto key = std::make_shared<const loom::crypt::SecretKey>(loom::crypt::SecretKey::generate());
      std::vector<std::string> sealed;
      fs::create_directories(root / "sealed");
      for (const std::string& path : small) {
        sealed.push_back((root / "sealed" / fs::path(path).filename()).string());
        loom::crypt::encrypt_file(path, sealed.back(), *key);
      }
      const auto data_wait = [&](const std::vector<std::string>& files, const char* name) {
        const loom::data::ShardSet train_set(files);
        loom::nn::GPTConfig config{.vocab_size = 4096, .context = 128, .layers = 4, .heads = 4, .channels = 128};
        loom::nn::GPT model(config, loom::nn::Precision::fp32(), loom::Device::cpu());
        loom::data::Prefetcher loader(std::make_unique<loom::data::ShardBatches>(
            train_set, loom::data::ShardBatchesOptions{.batch = 8, .steps = 128, .vocab_size = 4096, .seed = 2}), 2);
        loom::train::TrainerOptions train_options;
        train_options.schedule = {.max_lr = 1e-4f, .min_lr = 1e-5f, .warmup = 0, .total = steps + 3};
        loom::train::Trainer trainer(model, loader, train_options);
        for (int i = 0; i < 3; ++i) trainer.step();
        std::vector<double> step_s, data_s;
        for (int i = 0; i < steps; ++i) {
          const loom::train::StepResult r = trainer.step();
          step_s.push_back(r.seconds);
          data_s.push_back(r.phases[loom::telemetry::Phase::data]);
        }
        const double step = loom::bench::median(step_s), wait = loom::bench::median(data_s);
        double wait_sum = 0, step_sum = 0, wait_max = 0;
        for (int i = 0; i < steps; ++i) {
          wait_sum += data_s[static_cast<std::size_t>(i)], step_sum += step_s[static_cast<std::size_t>(i)];
          wait_max = std::max(wait_max, data_s[static_cast<std::size_t>(i)]);
        }
        std::printf("%-44s %14s\n", name, "value");
        std::printf("%-44s %14.2f\n", "step ms (median)", 1e3 * step);
        std::printf("%-44s %14.3f   (longest %.3f)\n", "data wait ms (median)", 1e3 * wait, 1e3 * wait_max);
        std::printf("%-44s %13.2f%%   (target <= 1%%; %.2f%% of all %d steps' time)\n\n", "data wait share",
                    100 * wait / step, 100 * wait_sum / step_sum, steps);
        return nlohmann::json{{"step_ms", 1e3 * step}, {"data_wait_ms", 1e3 * wait}, {"data_wait_max_ms", 1e3 * wait_max},
                              {"share", wait / step}, {"share_of_total", wait_sum / step_sum}};
      };
      nlohmann::json plain = data_wait(small, "CPU step (GPT 4L x 128, B 8, T 128)");
      plain["case"] = "cpu_step_data_wait";
      record["rows"].push_back(plain);
      loom::io::set_at_rest_key(key);  // (after the plain run: a run with a key refuses plain shards)
      nlohmann::json encrypted = data_wait(sealed, "the same on encrypted shards");
      encrypted["case"] = "cpu_step_data_wait_encrypted";
      record["rows"].push_back(encrypted);
      loom::io::set_at_rest_key(nullptr);
    }

    // 3. The tokenizer, against Python tokenizers on the same text and vocabulary.
    {
      const std::vector<std::string> docs{std::string(LOOM_SOURCE_DIR) + "/README.md",
                                          std::string(LOOM_SOURCE_DIR) + "/docs/ARCHITECTURE.md"};
      const std::string text = text_of(docs, text_mb);
      loom::data::PieceCounts counts;
      counts.add(text.substr(0, std::min<std::size_t>(text.size(), 2'000'000)), {"<|endoftext|>"});
      const loom::data::BpeTokenizer tokenizer = loom::data::train_bpe(counts, {.vocab_size = 8192});
      const fs::path vocab = root / "vocab";
      tokenizer.save(vocab.string());
      const fs::path text_path = root / "text.txt";
      std::ofstream(text_path, std::ios::binary) << text;
      // Documents: the text's paragraphs, as a corpus arrives (each encoded on its own).
      std::vector<std::string_view> documents;
      for (std::size_t from = 0; from < text.size();) {
        std::size_t end = text.find("\n\n", from);
        end = end == std::string::npos ? text.size() : end + 2;
        documents.emplace_back(text.data() + from, end - from);
        from = end;
      }
      std::vector<std::int32_t> ids;
      const auto one_start = Clock::now();
      for (const std::string_view d : documents) {
        const std::vector<std::int32_t> part = tokenizer.encode(d);
        ids.insert(ids.end(), part.begin(), part.end());
      }
      const double one = static_cast<double>(text.size()) / since(one_start);
      const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
      const auto all_start = Clock::now();
      std::vector<std::thread> pool;
      std::atomic<std::size_t> next{0};
      for (unsigned t = 0; t < cores; ++t) {
        pool.emplace_back([&] {
          for (std::size_t i = next++; i < documents.size(); i = next++) (void)tokenizer.encode(documents[i]);
        });
      }
      for (std::thread& t : pool) t.join();
      const double all = static_cast<double>(text.size()) / since(all_start);
      // tokenizers: encode_batch over the same paragraphs, on one thread (RAYON_NUM_THREADS=1) and on every core.
      const std::string script =
          "import json, sys, time\n"
          "from tokenizers import Tokenizer\n"
          "t = Tokenizer.from_file(sys.argv[1]); text = open(sys.argv[2], encoding='utf-8', newline='').read()\n"
          "docs = [d + '\\n\\n' for d in text.split('\\n\\n')]; docs[-1] = docs[-1][:-2]\n"
          "docs = [d for d in docs if d]\n"
          "s = time.perf_counter(); out = t.encode_batch(docs); rate = len(text.encode('utf-8')) / (time.perf_counter() - s)\n"
          "ids = [i for e in out for i in e.ids]\n"
          "print(json.dumps({'rate': rate, 'tokens': len(ids), 'first': ids[:1000]}))\n";
      const fs::path script_path = root / "peer.py";
      std::ofstream(script_path) << script;
      const auto run_peer = [&](const std::string& env) {
        const std::string command = env + " /usr/bin/python3 " + script_path.string() + " " +
                                    (vocab / "tokenizer.json").string() + " " + text_path.string() + " 2>&1";
        std::string output;
        if (FILE* pipe = ::popen(command.c_str(), "r")) {
          char buffer[4096];
          while (std::fgets(buffer, sizeof buffer, pipe) != nullptr) output += buffer;
          ::pclose(pipe);
        }
        try {
          return nlohmann::json::parse(output);
        } catch (const nlohmann::json::exception&) {
          std::printf("tokenizers (Python): not measured: %s\n", output.substr(0, 300).c_str());
          return nlohmann::json();
        }
      };
      const nlohmann::json peer = run_peer("RAYON_NUM_THREADS=1"), peer_all = run_peer("");
      std::printf("%-44s %14s %10s\n", "tokenizer (8192 tokens, paragraphs)", "MB/s", "vs peer 1T");
      const double peer_one = peer.is_object() ? peer["rate"].get<double>() : 0;
      const double peer_many = peer_all.is_object() ? peer_all["rate"].get<double>() : 0;
      const auto row = [&](const std::string& name, double rate) {
        std::printf("%-44s %14.2f %9.2fx\n", name.c_str(), rate / 1e6, peer_one > 0 ? rate / peer_one : 0.0);
      };
      row("loom, 1 thread", one);
      row("loom, " + std::to_string(cores) + " threads", all);
      if (peer.is_object()) {
        row("tokenizers (Python) encode_batch, 1 thread", peer_one);
        if (peer_many > 0) row("tokenizers (Python) encode_batch, every core", peer_many);
        const bool same = peer["tokens"].get<std::size_t>() == ids.size() &&
                          std::equal(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(std::min<std::size_t>(1000, ids.size())),
                                     peer["first"].begin(), [](std::int32_t a, const nlohmann::json& b) { return a == b.get<std::int32_t>(); });
        std::printf("same ids as tokenizers: %s (%zu tokens in %zu paragraphs)\n", same ? "yes" : "NO", ids.size(),
                    documents.size());
        record["tokenizer_peer_same_ids"] = same;
      }
      record["rows"].push_back({{"case", "tokenize"}, {"text_bytes", text.size()}, {"loom_1_thread_bytes_per_s", one},
                                {"loom_all_threads_bytes_per_s", all}, {"threads", cores},
                                {"tokenizers_1_thread_bytes_per_s", peer_one}, {"tokenizers_batch_bytes_per_s", peer_many}});
    }
    fs::remove_all(root);
    if (!json_path.empty()) loom::bench::write_json(json_path, record);
    return 0;
  } catch (const loom::Error& e) {
    std::fprintf(stderr, "data_bench: %s\n", e.what());
    return 1;
  }
}
