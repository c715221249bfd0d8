// Data sources on the CPU: the byte tokenizer, llm.c token shards (round trip and every kind of
// damage), language-modelling batches, the addition task (format, loss mask, determinism), the
// per-rank partition (ranks of a world read exactly the batches one process would, interleaved),
// seeking, and the background prefetcher (same stream, errors delivered).
#include <catch2/catch.hpp>

#include <cstring>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "loom/data/addition_task.hpp"
#include "loom/data/prefetcher.hpp"
#include "loom/data/token_batches.hpp"
#include "loom/data/token_shard.hpp"
#include "loom/data/tokenizer.hpp"
#include "support/tensor_checks.hpp"

using loom::ErrorCategory;
using loom::Tensor;
using loom::test::IsError;
namespace data = loom::data;

namespace {

std::vector<std::int32_t> values(const Tensor& t) { return t.to_vector<std::int32_t>(); }

std::string scratch_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("loom_test_data_" + name)).string();
}

// Batches of `world` ranks, interleaved, equal those of one process.
void require_partition_matches(const std::function<std::unique_ptr<data::BatchSource>(data::Partition)>& make) {
  auto single = make({0, 1});
  std::vector<std::unique_ptr<data::BatchSource>> ranks;
  for (int r = 0; r < 3; ++r) ranks.push_back(make({r, 3}));
  for (int round = 0; round < 2; ++round) {
    for (int r = 0; r < 3; ++r) {
      const data::Batch expected = single->next(), got = ranks[static_cast<std::size_t>(r)]->next();
      REQUIRE(values(got.inputs) == values(expected.inputs));
      REQUIRE(values(got.targets) == values(expected.targets));
    }
  }
}

}  // namespace

TEST_CASE("byte tokenizer round-trips every byte and names a bad token", "[data]") {
  std::string all;
  for (int c = 0; c < 256; ++c) all.push_back(static_cast<char>(c));
  const data::ByteTokenizer tokenizer;
  const std::vector<std::int32_t> tokens = tokenizer.encode(all);
  REQUIRE(tokens.size() == 256);
  REQUIRE(tokens[200] == 200);
  REQUIRE(tokenizer.decode(tokens) == all);
  const std::vector<std::int32_t> bad = {65, 300};
  REQUIRE_THROWS_MATCHES(tokenizer.decode(bad), loom::Error, IsError(ErrorCategory::invalid_argument, {"token 300"}));
}

TEST_CASE("llm.c token shards round-trip, and damaged shards are named errors", "[data]") {
  const std::string path = scratch_path("shard.bin");
  const std::vector<std::uint16_t> tokens = {0, 1, 50256, 17, 65535};
  data::write_token_shard(path, tokens);
  REQUIRE(std::filesystem::file_size(path) == 1024 + 10);
  REQUIRE(data::read_token_shard(path) == tokens);
  // An empty shard is valid (fuzz/token_shard found the zero-length copy being undefined).
  std::string empty(1024, '\0');
  const std::int32_t header[3] = {data::token_shard_magic, data::token_shard_version, 0};
  std::memcpy(empty.data(), header, sizeof(header));
  REQUIRE(data::parse_token_shard(empty, "empty").empty());

  std::filesystem::resize_file(path, 1024 + 7);
  REQUIRE_THROWS_MATCHES(data::read_token_shard(path), loom::Error,
                         IsError(ErrorCategory::corrupt_data, {"declares 5 tokens", "truncated"}));
  data::write_token_shard(path, tokens);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    const std::int32_t bad_magic = 12345;
    f.write(reinterpret_cast<const char*>(&bad_magic), 4);
  }
  REQUIRE_THROWS_MATCHES(data::read_token_shard(path), loom::Error,
                         IsError(ErrorCategory::corrupt_data, {"magic 12345"}));
  std::filesystem::resize_file(path, 100);
  REQUIRE_THROWS_MATCHES(data::read_token_shard(path), loom::Error,
                         IsError(ErrorCategory::corrupt_data, {"1024-byte header"}));
  std::filesystem::remove(path);
  REQUIRE_THROWS_MATCHES(data::read_token_shard(path), loom::Error, IsError(ErrorCategory::io, {"cannot open"}));
}

TEST_CASE("token batches: targets are the next tokens, windows wrap, ranks partition the stream", "[data]") {
  std::vector<std::int32_t> stream(50);
  for (int i = 0; i < 50; ++i) stream[static_cast<std::size_t>(i)] = i % 7;
  data::TokenBatches batches(stream, 7, 2, 8);
  REQUIRE(batches.windows() == 6);  // (50 - 1) / 8
  const data::Batch first = batches.next();
  const std::vector<std::int32_t> tokens = values(first.inputs), targets = values(first.targets);
  for (int i = 0; i < 16; ++i) {
    REQUIRE(tokens[static_cast<std::size_t>(i)] == i % 7);
    REQUIRE(targets[static_cast<std::size_t>(i)] == (i + 1) % 7);
  }
  batches.seek(3);  // global batch 3: windows 6 and 7 wrap to 0 and 1
  REQUIRE(values(batches.next().inputs) == tokens);
  require_partition_matches([&](data::Partition p) { return std::make_unique<data::TokenBatches>(stream, 7, 2, 8, p); });
  REQUIRE_THROWS_MATCHES(data::TokenBatches(stream, 5, 2, 8), loom::Error,
                         IsError(ErrorCategory::invalid_argument, {"token 5", "vocabulary [0, 5)"}));
  REQUIRE_THROWS_MATCHES(data::TokenBatches(stream, 7, 2, 50), loom::Error,
                         IsError(ErrorCategory::invalid_argument, {"50 tokens", "51"}));
  REQUIRE_THROWS_MATCHES(data::TokenBatches(stream, 7, 2, 8, {3, 2}), loom::Error,
                         IsError(ErrorCategory::invalid_argument, {"rank 3"}));
}

TEST_CASE("addition task: problem format, loss only on answers, determinism and partition", "[data]") {
  const data::AdditionTaskOptions options{.digits = 2, .seed = 9};
  data::AdditionTask task(options, 3, 20);
  for (std::uint64_t i = 0; i < 50; ++i) {
    const data::AdditionProblem p = task.problem(i);
    REQUIRE(p.a >= 0);
    REQUIRE(p.a < 100);
    REQUIRE(p.b < 100);
    char prompt[16], answer[16];
    std::snprintf(prompt, sizeof(prompt), "%02lld+%02lld=", static_cast<long long>(p.a), static_cast<long long>(p.b));
    std::snprintf(answer, sizeof(answer), "%03lld", static_cast<long long>(p.a + p.b));
    std::string reversed(answer);
    std::reverse(reversed.begin(), reversed.end());
    REQUIRE(p.prompt == prompt);
    REQUIRE(p.answer == reversed + "\n");
  }
  // A row of 21 bytes holds two 10-byte problems ("ab+cd=" then three answer digits and a
  // newline), then newline padding without loss.
  const data::Batch batch = task.next();
  const std::vector<std::int32_t> tokens = values(batch.inputs), targets = values(batch.targets);
  const data::AdditionProblem p0 = task.problem(0), p1 = task.problem(1);
  const std::string row = p0.prompt + p0.answer + p1.prompt + p1.answer + "\n";
  REQUIRE(row.size() == 21);
  for (int t = 0; t < 20; ++t) {
    const int predicted = t + 1;
    const bool answer_byte = predicted < 20 && predicted % 10 >= 6;
    const std::int32_t expected = answer_byte ? static_cast<unsigned char>(row[static_cast<std::size_t>(predicted)]) : -1;
    INFO("t = " << t);
    REQUIRE(tokens[static_cast<std::size_t>(t)] == static_cast<unsigned char>(row[static_cast<std::size_t>(t)]));
    REQUIRE(targets[static_cast<std::size_t>(t)] == expected);
  }
  data::AdditionTask again(options, 3, 20);
  REQUIRE(values(again.next().inputs) == tokens);
  data::AdditionTask other_seed({.digits = 2, .seed = 10}, 3, 20);
  REQUIRE(values(other_seed.next().inputs) != tokens);
  require_partition_matches([&](data::Partition p) { return std::make_unique<data::AdditionTask>(options, 3, 20, p); });
  REQUIRE_THROWS_MATCHES(data::AdditionTask(options, 3, 7), loom::Error,
                         IsError(ErrorCategory::invalid_argument, {"sequence length 7", "10-token problem"}));
}

namespace {
class FailingSource : public data::BatchSource {
 public:
  data::Batch next() override { loom::fail(ErrorCategory::io, "disk went away"); }
  std::int64_t position() const override { return 0; }
  void seek(std::int64_t) override {}
  std::int64_t vocab_size() const override { return 1; }
};
}  // namespace

TEST_CASE("prefetcher hands out the source's stream, seeks, and delivers its errors", "[data]") {
  const data::AdditionTaskOptions options{.digits = 3, .seed = 4};
  data::AdditionTask plain(options, 2, 24);
  data::Prefetcher prefetched(std::make_unique<data::AdditionTask>(options, 2, 24));
  for (int i = 0; i < 4; ++i) REQUIRE(values(prefetched.next().inputs) == values(plain.next().inputs));
  REQUIRE(prefetched.position() == 4);
  prefetched.seek(1);
  plain.seek(1);
  REQUIRE(values(prefetched.next().inputs) == values(plain.next().inputs));
  REQUIRE(prefetched.position() == 2);
  data::Prefetcher failing(std::make_unique<FailingSource>());
  REQUIRE_THROWS_MATCHES(failing.next(), loom::Error, IsError(ErrorCategory::io, {"disk went away"}));
}
