// Streaming token shards (shard_stream.hpp): the batches equal TokenBatches' over the same tokens
// in sequential order, at 1 and 3 ranks; unequal shards are read window by window in file order;
// a shuffled epoch visits every window once, in an order drawn from (seed, epoch); a job resumed at
// another number of ranks continues the exact stream; the held-out range never meets training's;
// bad input is named (empty glob, a file named twice, damaged headers, tokens outside the
// vocabulary, an empty range); and streaming 2 GiB of shards keeps the process's resident memory
// within 64 MiB of where it started. Encrypted shards give the plain ones' batches, and a missing
// key or a damaged chunk is named.
#include <catch2/catch.hpp>
#include <sys/stat.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "loom/crypt/encrypted_file.hpp"
#include "loom/data/shard_stream.hpp"
#include "loom/data/token_batches.hpp"
#include "loom/data/token_shard.hpp"
#include "loom/io/at_rest.hpp"
#include "support/file_damage.hpp"
#include "support/tensor_checks.hpp"

using loom::ErrorCategory;
using loom::test::IsError;
namespace data = loom::data;
namespace fs = std::filesystem;

namespace {

std::vector<std::int32_t> values(const loom::Tensor& t) { return t.to_vector<std::int32_t>(); }

// A directory of its own per test process (ctest runs tests in parallel), removed at the end.
struct ScratchDir {
  fs::path path = fs::temp_directory_path() / ("loom_test_shards_" + std::to_string(::getpid()));
  ScratchDir() {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~ScratchDir() { fs::remove_all(path); }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

// "s3.bin" (built in steps: GCC 12 warns falsely about "s" + to_string + ".bin", -Wrestrict).
std::string numbered(const std::string& stem, std::size_t i) {
  std::string name = stem;
  name += std::to_string(i);
  name += ".bin";
  return name;
}

std::vector<std::uint16_t> ramp(std::int64_t n, int start, int vocab) {
  std::vector<std::uint16_t> tokens(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) tokens[static_cast<std::size_t>(i)] = static_cast<std::uint16_t>((start + i * 7) % vocab);
  return tokens;
}

std::int64_t resident_bytes() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return -1;
}

}  // namespace

TEST_CASE("streamed shards in sequential order give TokenBatches' batches", "[data]") {
  const ScratchDir dir;
  const std::vector<std::uint16_t> tokens = ramp(5000, 3, 1000);
  data::write_token_shard(dir / "one.bin", tokens);
  const data::ShardSet set({dir / "one.bin"});
  const std::vector<std::int32_t> widened(tokens.begin(), tokens.end());
  for (const int world : {1, 3}) {
    for (int rank = 0; rank < world; ++rank) {
      INFO("rank " << rank << " of " << world);
      data::TokenBatches whole(widened, 1000, 4, 32, {rank, world});
      data::ShardBatches streamed(set, {.batch = 4, .steps = 32, .vocab_size = 1000, .order = data::WindowOrder::sequential},
                                  {rank, world});
      REQUIRE(streamed.windows() == whole.windows());
      for (int i = 0; i < 50; ++i) {  // 50 x 3 x 4 rows wrap the 156 windows: epochs too
        const data::Batch a = whole.next(), b = streamed.next();
        REQUIRE(values(a.inputs) == values(b.inputs));
        REQUIRE(values(a.targets) == values(b.targets));
      }
    }
  }
}

TEST_CASE("unequal shards are read window by window, never across a shard's end", "[data]") {
  const ScratchDir dir;
  const std::vector<std::vector<std::uint16_t>> shards = {ramp(100, 0, 500), ramp(33, 1, 500), ramp(9, 2, 500),
                                                          ramp(250, 3, 500)};
  std::vector<std::string> paths;
  for (std::size_t i = 0; i < shards.size(); ++i) {
    paths.push_back(dir / numbered("s", i));
    data::write_token_shard(paths.back(), shards[i]);
  }
  const data::ShardSet set(paths);
  const std::int64_t T = 10;
  // (n - 1) / T windows each: 9, 3, 0, 24.
  CHECK(set.windows(0, T) == 9);
  CHECK(set.windows(2, T) == 0);
  CHECK(set.windows(T) == 36);
  data::ShardBatches stream(set, {.batch = 1, .steps = T, .vocab_size = 500, .order = data::WindowOrder::sequential});
  std::vector<std::pair<std::size_t, std::int64_t>> expected;  // (shard, first token) in file order
  for (std::size_t s = 0; s < shards.size(); ++s) {
    for (std::int64_t w = 0; w < set.windows(s, T); ++w) expected.emplace_back(s, w * T);
  }
  for (std::size_t q = 0; q < expected.size(); ++q) {
    const data::Batch b = stream.next();
    const auto& [s, first] = expected[q];
    const auto in = values(b.inputs), target = values(b.targets);
    for (std::int64_t t = 0; t < T; ++t) {
      REQUIRE(in[static_cast<std::size_t>(t)] == shards[s][static_cast<std::size_t>(first + t)]);
      REQUIRE(target[static_cast<std::size_t>(t)] == shards[s][static_cast<std::size_t>(first + t + 1)]);
    }
  }
}

TEST_CASE("a shuffled epoch visits every window once, in an order drawn from the seed and the epoch", "[data]") {
  const ScratchDir dir;
  std::vector<std::string> paths;
  for (int i = 0; i < 5; ++i) {
    paths.push_back(dir / numbered("s", i));
    data::write_token_shard(paths.back(), ramp(200 + 37 * i, i, 300));
  }
  const data::ShardSet set(paths);
  const data::ShardBatchesOptions options{.batch = 2, .steps = 16, .vocab_size = 300, .order = data::WindowOrder::shuffled,
                                          .seed = 42};
  const data::ShardBatches stream(set, options);
  const std::int64_t W = stream.windows();
  const auto epoch = [&](const data::ShardBatches& s, std::int64_t e) {
    std::vector<std::pair<std::size_t, std::int64_t>> order;
    for (std::int64_t k = 0; k < W; ++k) {
      const auto at = s.place(e * W + k);
      order.emplace_back(at.shard, at.token);
    }
    return order;
  };
  const auto first = epoch(stream, 0), second = epoch(stream, 1);
  const std::set<std::pair<std::size_t, std::int64_t>> visited(first.begin(), first.end());
  CHECK(static_cast<std::int64_t>(visited.size()) == W);  // every window, once
  CHECK(std::set<std::pair<std::size_t, std::int64_t>>(second.begin(), second.end()) == visited);
  CHECK(first != second);  // a new order every epoch
  // Shard by shard: an epoch reads each shard's windows in one run.
  std::size_t runs = 1;
  for (std::size_t i = 1; i < first.size(); ++i) runs += first[i].first != first[i - 1].first;
  CHECK(runs == set.shards());
  data::ShardBatchesOptions other = options;
  other.seed = 43;
  CHECK(epoch(data::ShardBatches(set, options), 0) == first);  // the same seed, the same order
  CHECK(epoch(data::ShardBatches(set, other), 0) != first);
}

TEST_CASE("a streamed job resumed at another number of ranks continues the exact stream", "[data]") {
  const ScratchDir dir;
  data::write_token_shard(dir / "a.bin", ramp(3000, 5, 700));
  data::write_token_shard(dir / "b.bin", ramp(1700, 9, 700));
  const data::ShardSet set({dir / "a.bin", dir / "b.bin"});
  const data::ShardBatchesOptions options{.batch = 3, .steps = 20, .vocab_size = 700, .seed = 7};
  data::ShardBatches single(set, options);
  std::vector<std::vector<std::int32_t>> reference;  // global batches 0..23 as one process reads them
  for (int g = 0; g < 24; ++g) reference.push_back(values(single.next().inputs));
  // Two ranks take 4 batches each (global 0..7), save; four ranks resume and take 4 each (8..23).
  std::int64_t consumed = 0;
  for (int rank = 0; rank < 2; ++rank) {
    data::ShardBatches s(set, options, {rank, 2});
    for (int p = 0; p < 4; ++p) REQUIRE(values(s.next().inputs) == reference[static_cast<std::size_t>(p * 2 + rank)]);
    consumed = s.consumed_at(s.position(), 2);
  }
  REQUIRE(consumed == 8);
  for (int rank = 0; rank < 4; ++rank) {
    data::ShardBatches s(set, options, {rank, 4});
    s.seek(s.position_at(consumed, 4));
    for (int p = 0; p < 4; ++p) {
      REQUIRE(values(s.next().inputs) == reference[static_cast<std::size_t>(8 + p * 4 + rank)]);
    }
  }
}

TEST_CASE("encrypted shards give the plain shards' batches and each of a missing key, a plain shard and a damaged chunk is named", "[data][at_rest]") {
  const ScratchDir dir;
  const auto key = std::make_shared<const loom::crypt::SecretKey>(loom::crypt::SecretKey::generate());
  std::vector<std::string> plain, sealed;
  std::vector<std::vector<std::uint16_t>> shards;
  for (std::size_t i = 0; i < 3; ++i) {
    shards.push_back(ramp(2500 + 700 * static_cast<std::int64_t>(i), static_cast<int>(i), 900));
    plain.push_back(dir / numbered("p", i));
    sealed.push_back(dir / numbered("e", i));
    data::write_token_shard(plain.back(), shards.back());
    loom::crypt::encrypt_file(plain.back(), sealed.back(), *key, 1024);  // several chunks a shard
  }
  const data::ShardBatchesOptions options{.batch = 3, .steps = 32, .vocab_size = 900, .seed = 11};
  // Without the key: named when the set is opened, with the id the shard needs.
  REQUIRE_THROWS_MATCHES(data::ShardSet(sealed), loom::Error,
                         IsError(ErrorCategory::invalid_argument, {sealed[0], key->id_hex(), "--key-file"}));
  loom::io::set_at_rest_key(key);
  struct Reset {
    ~Reset() {
      loom::io::set_at_rest_key(nullptr);
      loom::io::set_plain_input_allowed(false);
    }
  } reset;
  // With a key, plain shards are refused by name unless plain input is allowed.
  REQUIRE_THROWS_MATCHES(data::ShardSet(plain), loom::Error,
                         IsError(ErrorCategory::invalid_argument, {plain[0], "is plain", "--allow-plain-input"}));
  REQUIRE_THROWS_MATCHES(data::read_token_shard(plain[0]), loom::Error,
                         IsError(ErrorCategory::invalid_argument, {plain[0], "is plain"}));
  // A FIFO in the set is refused at once, not waited on.
  const std::string fifo = dir / numbered("f", 0);
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  REQUIRE_THROWS_MATCHES(data::ShardSet(std::vector<std::string>{sealed[0], fifo}), loom::Error,
                         IsError(ErrorCategory::invalid_argument, {fifo, "not a regular file"}));
  loom::io::set_plain_input_allowed(true);
  const data::ShardSet plain_set(plain), sealed_set(sealed);
  CHECK(sealed_set.tokens() == plain_set.tokens());
  CHECK(sealed_set.shard(1).encrypted());
  for (int rank = 0; rank < 2; ++rank) {
    data::ShardBatches a(plain_set, options, {rank, 2}), b(sealed_set, options, {rank, 2});
    for (int i = 0; i < 60; ++i) {  // more than an epoch: every shard, twice
      INFO("rank " << rank << ", batch " << i);
      const data::Batch x = a.next(), y = b.next();
      REQUIRE(values(x.inputs) == values(y.inputs));
      REQUIRE(values(x.targets) == values(y.targets));
    }
  }
  CHECK(data::read_token_shard(sealed[2]) == shards[2]);
  // A flipped byte in a middle chunk: the shard fails by name when it is read, never trains.
  loom::test::flip_byte(sealed[1], 3000);
  const data::ShardSet damaged(sealed);  // the header chunk is intact
  data::ShardBatches stream(damaged, {.batch = 1, .steps = 32, .vocab_size = 900, .order = data::WindowOrder::sequential});
  for (std::int64_t i = 0; i < damaged.windows(0, 32); ++i) stream.next();  // shard 0 is fine
  REQUIRE_THROWS_MATCHES(stream.next(), loom::Error, IsError(ErrorCategory::corrupt_data, {sealed[1], "chunk"}));
  REQUIRE_THROWS_MATCHES(stream.next(), loom::Error, IsError(ErrorCategory::corrupt_data, {sealed[1], "chunk"}));
}

TEST_CASE("a held-out window range never meets the training range", "[data]") {
  const ScratchDir dir;
  data::write_token_shard(dir / "a.bin", ramp(801, 0, 100));
  const data::ShardSet set({dir / "a.bin"});
  data::ShardBatchesOptions options{.batch = 1, .steps = 8, .vocab_size = 100, .seed = 1, .first_window = 0,
                                    .last_window = 90};
  const data::ShardBatches train(set, options);
  options.first_window = 90;
  options.last_window = -1;
  const data::ShardBatches held(set, options);
  CHECK(train.windows() == 90);
  CHECK(held.windows() == 10);
  std::set<std::int64_t> trained, held_out;
  for (std::int64_t q = 0; q < 3 * 90; ++q) trained.insert(train.place(q).token);
  for (std::int64_t q = 0; q < 20; ++q) held_out.insert(held.place(q).token);
  CHECK(trained.size() == 90);
  CHECK(*held_out.begin() == 90 * 8);
  CHECK(*trained.rbegin() < 90 * 8);
}

TEST_CASE("bad shard sets are named before training starts", "[data]") {
  const ScratchDir dir;
  data::write_token_shard(dir / "ok.bin", ramp(100, 0, 50));
  REQUIRE_THROWS_MATCHES(data::expand_shard_paths(dir / "none_*.bin"), loom::Error,
                         IsError(ErrorCategory::invalid_argument, {"none_*.bin", "matches no file"}));
  REQUIRE_THROWS_MATCHES(data::expand_shard_paths((dir / "ok.bin") + "," + (dir / "o*.bin")), loom::Error,
                         IsError(ErrorCategory::invalid_argument, {"ok.bin", "is named twice"}));
  REQUIRE_THROWS_MATCHES(data::expand_shard_paths((dir / "ok.bin") + ","), loom::Error,
                         IsError(ErrorCategory::invalid_argument, {"an empty entry"}));
  CHECK(data::expand_shard_paths(dir / "o*.bin") == std::vector<std::string>{dir / "ok.bin"});
  REQUIRE_THROWS_MATCHES(data::MappedShard(dir / "missing.bin"), loom::Error,
                         IsError(ErrorCategory::io, {"cannot open token shard", "missing.bin"}));
  {
    std::ofstream(dir / "text.bin") << "not a shard at all, and much shorter than a header";
  }
  REQUIRE_THROWS_MATCHES(data::MappedShard(dir / "text.bin"), loom::Error,
                         IsError(ErrorCategory::corrupt_data, {"text.bin", "shorter", "1024-byte header"}));
  {
    std::vector<char> header(1024 + 20, 0);
    const std::int32_t fields[3] = {data::token_shard_magic, 2, 10};  // a version this reader does not know
    std::memcpy(header.data(), fields, sizeof fields);
    std::ofstream(dir / "v2.bin", std::ios::binary).write(header.data(), static_cast<std::streamsize>(header.size()));
  }
  REQUIRE_THROWS_MATCHES(data::ShardSet({dir / "ok.bin", dir / "v2.bin"}), loom::Error,
                         IsError(ErrorCategory::corrupt_data, {"v2.bin", "version 2"}));
  fs::resize_file(dir / "ok.bin", fs::file_size(dir / "ok.bin") - 2);
  REQUIRE_THROWS_MATCHES(data::MappedShard(dir / "ok.bin"), loom::Error,
                         IsError(ErrorCategory::corrupt_data, {"ok.bin", "declares 100 tokens", "truncated"}));

  data::write_token_shard(dir / "big.bin", {1, 2, 3, 4, 5, 60000, 7, 8, 9, 10});
  const data::ShardSet set({dir / "big.bin"});
  data::ShardBatches stream(set, {.batch = 1, .steps = 4, .vocab_size = 256, .order = data::WindowOrder::sequential});
  CHECK_NOTHROW(stream.next());  // tokens 0-4
  REQUIRE_THROWS_MATCHES(stream.next(), loom::Error,
                         IsError(ErrorCategory::corrupt_data, {"big.bin", "token 60000 at position 5",
                                                               "outside the vocabulary [0, 256)", "--vocab 50257"}));
  REQUIRE_THROWS_MATCHES(data::ShardBatches(set, {.batch = 1, .steps = 20, .vocab_size = 256}), loom::Error,
                         IsError(ErrorCategory::invalid_argument, {"windows [0, 0)", "0 windows of 21 tokens"}));
  REQUIRE_THROWS_MATCHES(
      data::ShardBatches(set, {.batch = 1, .steps = 2, .vocab_size = 256, .first_window = 3, .last_window = 9}),
      loom::Error, IsError(ErrorCategory::invalid_argument, {"windows [3, 9)", "the set's 4 windows"}));
  REQUIRE_THROWS_MATCHES(data::ShardBatches(set, {.batch = 1, .steps = 2, .vocab_size = 70000}), loom::Error,
                         IsError(ErrorCategory::invalid_argument, {"70000", "uint16"}));
}

TEST_CASE("streaming 2 GiB of shards keeps resident memory within 64 MiB", "[data]") {
  const ScratchDir dir;
  // Two shards of 2^29 tokens (1 GiB each), written 16 MiB at a time so that making them costs
  // no memory either.
  const std::int64_t per_shard = std::int64_t{1} << 29, chunk = std::int64_t{1} << 23;
  std::vector<std::string> paths;
  std::vector<std::uint16_t> block(static_cast<std::size_t>(chunk));
  for (int s = 0; s < 2; ++s) {
    paths.push_back(dir / numbered("big", static_cast<std::size_t>(s)));
    std::ofstream out(paths.back(), std::ios::binary);
    std::int32_t header[256] = {data::token_shard_magic, data::token_shard_version, static_cast<std::int32_t>(per_shard)};
    out.write(reinterpret_cast<const char*>(header), sizeof header);
    for (std::int64_t at = 0; at < per_shard; at += chunk) {
      for (std::int64_t i = 0; i < chunk; ++i) block[static_cast<std::size_t>(i)] = static_cast<std::uint16_t>((s * 7 + at + i) % 50257);
      out.write(reinterpret_cast<const char*>(block.data()), static_cast<std::streamsize>(chunk * 2));
    }
    REQUIRE(out.good());
  }
  block = {};
  block.shrink_to_fit();
  const data::ShardSet set(paths);
  const std::int64_t T = 1024, B = 64;
  data::ShardBatches stream(set, {.batch = B, .steps = T, .vocab_size = 50257, .seed = 3});
  const std::int64_t batches = stream.windows() / B;  // one epoch: every token read once
  const std::int64_t before = resident_bytes();
  REQUIRE(before > 0);
  std::int64_t peak = before;
  for (std::int64_t i = 0; i < batches; ++i) {
    const data::Batch b = stream.next();
    if (i % 256 == 0) {
      peak = std::max(peak, resident_bytes());
      // Spot check: the first row is window place(i B) of its shard.
      const auto at = stream.place(i * B);
      const std::int32_t expected = static_cast<std::int32_t>((static_cast<std::int64_t>(at.shard) * 7 + at.token) % 50257);
      REQUIRE(b.inputs.data<std::int32_t>()[0] == expected);
    }
  }
  peak = std::max(peak, resident_bytes());
  INFO("resident before " << before / (1 << 20) << " MiB, at most " << peak / (1 << 20) << " MiB while streaming "
                          << batches * B * (T + 1) * 2 / (1 << 20) << " MiB of tokens");
  CHECK(peak - before < (std::int64_t{64} << 20));
}
