// loom-tokenize: GPT-2 byte-level BPE vocabularies and token shards, from text.
//   loom-tokenize train --vocab-size N --out DIR FILES...     learn a vocabulary (Hugging Face files)
//   loom-tokenize encode --vocab V --out PREFIX FILES...      text or JSONL to llm.c token shards
//   loom-tokenize ids --vocab V FILES...                      each file's ids as a JSON line (to compare tokenizers)
// V is a tokenizer.json, or a directory with tokenizer.json or vocab.json + merges.txt. Work is
// spread over --threads cores (all by default); documents keep their order in the shards.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "loom/core/error.hpp"
#include "loom/data/bpe_tokenizer.hpp"
#include "loom/data/bpe_trainer.hpp"
#include "loom/data/token_shard.hpp"
#include "loom/io/files.hpp"
#include "text_parts.hpp"

namespace {

using Clock = std::chrono::steady_clock;

// The next round of parts: two per thread, so every core has work while the round lasts.
std::vector<loom_tokenize::TextPart> next_round(loom_tokenize::TextParts& parts, unsigned threads) {
  std::vector<loom_tokenize::TextPart> round;
  while (round.size() < 2 * static_cast<std::size_t>(threads)) {
    std::optional<loom_tokenize::TextPart> part = parts.next();
    if (!part) break;
    round.push_back(std::move(*part));
  }
  return round;
}

// Runs body(i) for i in [0, n) on `threads` threads.
template <class Body>
void parallel_for(std::size_t n, unsigned threads, const Body& body) {
  std::atomic<std::size_t> next{0};
  std::vector<std::thread> pool;
  std::exception_ptr failure;
  std::mutex failure_mutex;
  for (unsigned t = 0; t < std::max(1u, threads); ++t) {
    pool.emplace_back([&] {
      try {
        for (std::size_t i = next++; i < n; i = next++) body(i);
      } catch (...) {
        const std::lock_guard lock(failure_mutex);
        if (!failure) failure = std::current_exception();
      }
    });
  }
  for (std::thread& t : pool) t.join();
  if (failure) std::rethrow_exception(failure);
}

class Progress {
 public:
  void show(std::size_t files, std::size_t of, std::int64_t documents, std::int64_t tokens, std::int64_t bytes, bool last) {
    const double seconds = std::chrono::duration<double>(Clock::now() - start_).count();
    if (!last && seconds - shown_ < 1) return;
    shown_ = seconds;
    std::fprintf(stderr, "\r%zu/%zu files, %lld documents, %lld tokens, %.1f MB of text, %.0f tokens/s%s", files, of,
                 static_cast<long long>(documents), static_cast<long long>(tokens), static_cast<double>(bytes) / 1e6,
                 seconds > 0 ? static_cast<double>(tokens) / seconds : 0.0, last ? "\n" : "");
  }

 private:
  Clock::time_point start_ = Clock::now();
  double shown_ = -1;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("loom-tokenize: GPT-2 byte-level BPE vocabularies and llm.c token shards");
  app.require_subcommand(1);
  std::vector<std::string> files;
  std::string vocab, out, field;
  unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::int64_t vocab_size = 0, min_frequency = 2, shard_tokens = 100'000'000;
  std::size_t part_kb = 4096;
  std::vector<std::string> specials{"<|endoftext|>"};
  CLI::App* train = app.add_subcommand("train", "learn a byte-level BPE vocabulary from text files");
  train->add_option("--vocab-size", vocab_size, "tokens in all: 256 bytes + merges + special tokens")->required();
  train->add_option("--out", out, "directory for vocab.json, merges.txt and tokenizer.json")->required();
  train->add_option("--special", specials, "special tokens (default <|endoftext|>)");
  train->add_option("--min-frequency", min_frequency, "stop when the best pair occurs fewer times");
  CLI::App* encode = app.add_subcommand("encode", "text or JSONL files to llm.c token shards");
  encode->add_option("--vocab", vocab, "tokenizer.json, or a directory with it or vocab.json + merges.txt")->required();
  encode->add_option("--out", out, "shard prefix: PREFIX_000000.bin, ...")->required();
  encode->add_option("--shard-tokens", shard_tokens, "tokens per shard");
  CLI::App* ids = app.add_subcommand("ids", "each file's ids as a JSON line, and whether they decode to its bytes");
  ids->add_option("--vocab", vocab, "tokenizer.json, or a directory with it or vocab.json + merges.txt")->required();
  for (CLI::App* command : {train, encode}) {
    command->add_option("files", files, "text files (JSONL with --jsonl-field)")->required()->check(CLI::ExistingFile);
    command->add_option("--jsonl-field", field, "read JSON lines, each document in this field (e.g. text)");
    command->add_option("--threads", threads, "threads (default: every core)")->check(CLI::Range(1u, 1024u));
    command->add_option("--part-kb", part_kb, "text read and tokenized per task, in KiB (a large file is cut into "
                        "parts where GPT-2's pieces end, which change no id)")->check(CLI::Range(1ul, 1ul << 22));
  }
  ids->add_option("files", files, "text files: a JSON line each")->required()->check(CLI::ExistingFile);
  CLI11_PARSE(app, argc, argv);
  try {
    if (ids->parsed()) {
      const loom::data::BpeTokenizer tokenizer = loom::data::BpeTokenizer::load(vocab);
      for (const std::string& file : files) {
        const std::string text = loom::io::read_file(file);
        const std::vector<std::int32_t> tokens = tokenizer.encode(text);
        std::printf("%s\n", nlohmann::json{{"file", file}, {"ids", tokens}, {"round_trip", tokenizer.decode(tokens) == text}}
                                .dump().c_str());
      }
      return 0;
    }
    if (train->parsed()) {
      const auto start = Clock::now();
      // Counted part by part: a part ends where a piece does, so the counts are the whole files'.
      loom_tokenize::TextParts parts(files, field, specials, part_kb * 1024);
      loom::data::PieceCounts all;
      std::int64_t bytes = 0;
      for (auto round = next_round(parts, threads); !round.empty(); round = next_round(parts, threads)) {
        std::vector<loom::data::PieceCounts> counts(round.size());
        parallel_for(round.size(), threads, [&](std::size_t i) {
          for (const std::string& document : round[i].documents) counts[i].add(document, specials);
        });
        for (std::size_t i = 0; i < round.size(); ++i) {
          all.merge(counts[i]);
          bytes += round[i].bytes;
        }
      }
      const loom::data::BpeTokenizer tokenizer = loom::data::train_bpe(
          all, {.vocab_size = vocab_size, .specials = specials, .min_frequency = min_frequency});
      tokenizer.save(out);
      std::printf("trained %lld tokens (256 bytes, %zu merges, %zu special) from %.1f MB of text in %zu files in %.1f s; "
                  "wrote %s/vocab.json, merges.txt and tokenizer.json\n",
                  static_cast<long long>(tokenizer.vocab_size()), tokenizer.merges(), specials.size(),
                  static_cast<double>(bytes) / 1e6, files.size(),
                  std::chrono::duration<double>(Clock::now() - start).count(), out.c_str());
      if (tokenizer.vocab_size() < vocab_size) {
        std::printf("%lld tokens short of --vocab-size: no pair of the text occurs --min-frequency (%lld) times "
                    "any more\n", static_cast<long long>(vocab_size - tokenizer.vocab_size()),
                    static_cast<long long>(min_frequency));
      }
      return 0;
    }
    const loom::data::BpeTokenizer tokenizer = loom::data::BpeTokenizer::load(vocab);
    const std::optional<std::int32_t> end_of_text = tokenizer.special_id("<|endoftext|>");
    loom::require(end_of_text.has_value(), "loom-tokenize encode: the vocabulary '", vocab,
                  "' has no <|endoftext|> token to put between documents");
    loom::require(tokenizer.vocab_size() <= 65536, "loom-tokenize encode: a vocabulary of ", tokenizer.vocab_size(),
                  " does not fit llm.c's uint16 tokens");
    loom::data::TokenShardWriter writer(out, shard_tokens);
    Progress progress;
    loom_tokenize::TextParts parts(files, field, tokenizer.special_tokens(), part_kb * 1024);
    std::int64_t documents = 0, bytes = 0;
    std::size_t files_done = 0;
    for (auto round = next_round(parts, threads); !round.empty(); round = next_round(parts, threads)) {
      // Each document is <|endoftext|> and its tokens, as llm.c's data scripts write them; a text
      // file's later parts continue its document.
      std::vector<std::vector<std::int32_t>> encoded(round.size());
      parallel_for(round.size(), threads, [&](std::size_t i) {
        for (const std::string& document : round[i].documents) {
          if (!round[i].continues) encoded[i].push_back(*end_of_text);
          const std::vector<std::int32_t> tokens = tokenizer.encode(document);
          encoded[i].insert(encoded[i].end(), tokens.begin(), tokens.end());
        }
      });
      for (std::size_t i = 0; i < round.size(); ++i) {
        writer.add(encoded[i]);
        bytes += round[i].bytes;
        documents += round[i].continues ? 0 : static_cast<std::int64_t>(round[i].documents.size());
        files_done += round[i].ends_file ? 1 : 0;
      }
      progress.show(files_done, files.size(), documents, writer.tokens(), bytes, false);
    }
    progress.show(files.size(), files.size(), documents, writer.tokens(), bytes, true);
    loom::require(documents > 0, "loom-tokenize encode: the files hold no documents",
                  field.empty() ? "" : " (no non-blank JSON lines)");
    const std::vector<std::string> shards = writer.finish();
    std::printf("wrote %zu shards (%s ... %s), %lld tokens\n", shards.size(), shards.front().c_str(),
                shards.back().c_str(), static_cast<long long>(writer.tokens()));
    return 0;
  } catch (const loom::Error& error) {
    std::fprintf(stderr, "loom-tokenize: %s\n", error.what());
    return 1;
  } catch (const std::exception& error) {  // the standard library's (a file system refusing, a JSON dump)
    std::fprintf(stderr, "loom-tokenize: %s\n", error.what());
    return 1;
  }
}
