#include "data_setup.hpp"

#include <algorithm>
#include <sstream>
#include <vector>

#include "loom/core/error.hpp"
#include "loom/data/addition_task.hpp"
#include "loom/data/prefetcher.hpp"
#include "loom/data/token_batches.hpp"
#include "loom/data/tokenizer.hpp"
#include "loom/nn/generate.hpp"

namespace train_gpt {

namespace {

constexpr std::uint64_t held_out_seed_offset = 0x5eed0fe1a1ull;

// Exact-match accuracy of greedy answers on 200 problems from the evaluation stream, and a few of
// them as a sample. The stream is separate from training, but with few digits the problems are
// not unseen (2 digits: 10^4 problems, all met in training); use --digits 4 or more for that.
// Generates in chunks of the training micro-batch, so that evaluation needs no more activation
// memory than a step (--batch auto sized the micro-batch to the memory).
double addition_accuracy(loom::nn::GPT& model, const loom::data::AdditionTask& task, std::int64_t chunk,
                         std::string& sample) {
  const int problems = 200;
  std::vector<std::vector<std::int32_t>> prompts;
  std::vector<loom::data::AdditionProblem> cases;
  const loom::data::ByteTokenizer bytes;
  for (int i = 0; i < problems; ++i) {
    cases.push_back(task.problem(loom::data::AdditionTask::held_out_base + static_cast<std::uint64_t>(i)));
    prompts.push_back(bytes.encode(cases.back().prompt));
  }
  const std::int64_t answer_length = static_cast<std::int64_t>(cases.front().answer.size());
  std::vector<std::vector<std::int32_t>> answers;
  for (std::size_t first = 0; first < prompts.size(); first += static_cast<std::size_t>(chunk)) {
    const auto last = prompts.begin() + static_cast<std::ptrdiff_t>(std::min(prompts.size(), first + static_cast<std::size_t>(chunk)));
    const std::vector<std::vector<std::int32_t>> some(prompts.begin() + static_cast<std::ptrdiff_t>(first), last);
    for (auto& answer : loom::nn::generate(model, some, {.max_new_tokens = answer_length})) answers.push_back(std::move(answer));
  }
  int correct = 0;
  std::ostringstream shown;
  for (int i = 0; i < problems; ++i) {
    std::string got;
    for (std::int32_t t : answers[static_cast<std::size_t>(i)]) got += static_cast<char>(t >= 32 && t < 127 ? t : '?');
    const std::string want = cases[static_cast<std::size_t>(i)].answer.substr(0, answer_length - 1);
    got = got.substr(0, static_cast<std::size_t>(answer_length - 1));
    const bool ok = got == want;
    correct += ok;
    if (i < 4) {
      shown << "  " << cases[static_cast<std::size_t>(i)].prompt << got << "   (" << cases[static_cast<std::size_t>(i)].a
            << " + " << cases[static_cast<std::size_t>(i)].b << "; answers are written reversed) " << (ok ? "ok" : "wrong")
            << "\n";
    }
  }
  sample = shown.str();
  return static_cast<double>(correct) / problems;
}

}  // namespace

RunData::RunData(const RunConfig& config, loom::data::Partition partition) : config_(config) {
  const std::int64_t steps = config.seq_len > 0 ? config.seq_len : config.model.context;
  steps_ = steps;
  std::unique_ptr<loom::data::BatchSource> train;
  if (config.data == "addition") {
    train = std::make_unique<loom::data::AdditionTask>(
        loom::data::AdditionTaskOptions{.digits = config.digits, .seed = config.seed}, config.batch, steps, partition);
    held_out_ = std::make_unique<loom::data::AdditionTask>(
        loom::data::AdditionTaskOptions{.digits = config.digits, .seed = config.seed + held_out_seed_offset},
        config.batch, steps);
  } else if (config.data.starts_with("shards:")) {
    // Streamed: the shards stay on disk (mapped); the last 10% of the windows, in file order, are
    // held out (at least one), read in order.
    shards_ = std::make_unique<loom::data::ShardSet>(loom::data::expand_shard_paths(config.data.substr(7)));
    const std::int64_t windows = shards_->windows(steps);
    loom::require(windows >= 2, "--data ", config.data, " holds ", shards_->tokens(), " tokens in ", shards_->shards(),
                  " shards, ", windows, " windows of ", steps + 1, " tokens; training and a held-out evaluation need "
                  "2 at least: use more data or a shorter --seq-len");
    const std::int64_t held = std::max<std::int64_t>(1, windows / 10);
    loom::data::ShardBatchesOptions options{.batch = config.batch, .steps = steps, .vocab_size = config.model.vocab_size,
                                            .order = config.data_order == "sequential"
                                                         ? loom::data::WindowOrder::sequential
                                                         : loom::data::WindowOrder::shuffled,
                                            .seed = config.seed, .first_window = 0, .last_window = windows - held};
    train = std::make_unique<loom::data::ShardBatches>(*shards_, options, partition);
    options.order = loom::data::WindowOrder::sequential;
    options.first_window = windows - held;
    options.last_window = windows;
    held_out_ = std::make_unique<loom::data::ShardBatches>(*shards_, options);
    description_ = "data: " + std::to_string(shards_->shards()) + " llm.c shards (" +
                   std::to_string(shards_->tokens()) + " tokens, mapped), " + std::to_string(windows - held) +
                   " windows of " + std::to_string(steps + 1) + " tokens to train on, " + config.data_order +
                   (config.data_order == "shuffled" ? " per epoch" : "") + ", " + std::to_string(held) +
                   " held out; " + std::to_string(config.prefetch) + " batches prefetched";
  } else {
    loom::require(config.data.starts_with("text:"), "--data must be addition, text:PATH or shards:GLOB[,GLOB...], got '",
                  config.data, "'");
    std::vector<std::int32_t> tokens = loom::data::read_text_tokens(config.data.substr(5));
    // The last 10% is held out (at least one window), so the data needs two windows at least.
    const auto needed = static_cast<std::size_t>(2 * (steps + 1));
    loom::require(tokens.size() >= needed, "--data ", config.data, " holds ", tokens.size(), " tokens; sequences of ",
                  steps, " need at least ", needed, " (", steps + 1, " to train on and as many held out for "
                  "evaluation): use more data or a shorter --seq-len");
    const std::size_t cut = std::min(tokens.size() - std::min<std::size_t>(tokens.size(), steps + 1),
                                     tokens.size() * 9 / 10);
    std::vector<std::int32_t> held(tokens.begin() + static_cast<std::ptrdiff_t>(cut), tokens.end());
    tokens.resize(cut);
    train = std::make_unique<loom::data::TokenBatches>(std::move(tokens), 256, config.batch, steps, partition);
    held_out_ = std::make_unique<loom::data::TokenBatches>(std::move(held), 256, config.batch, steps);
  }
  train_ = std::make_unique<loom::data::Prefetcher>(std::move(train), config.prefetch);
  if (!config.tokenizer.empty()) {
    bpe_ = std::make_unique<loom::data::BpeTokenizer>(loom::data::BpeTokenizer::load(config.tokenizer));
    loom::require(bpe_->vocab_size() <= config.model.vocab_size, "--tokenizer ", config.tokenizer, " has ",
                  bpe_->vocab_size(), " tokens, more than the model's vocabulary of ", config.model.vocab_size,
                  ": give --vocab ", bpe_->vocab_size(), " or more");
    loom::require(bpe_->special_id("<|endoftext|>").has_value(), "--tokenizer ", config.tokenizer,
                  " has no <|endoftext|> token to start samples from");
  }
}

Evaluation RunData::evaluate(loom::nn::GPT& model, bool with_sample) {
  Evaluation e;
  held_out_->seek(0);
  double sum = 0;
  for (std::int64_t i = 0; i < config_.eval_batches; ++i) {
    const loom::data::Batch batch = held_out_->next();
    sum += model.forward(batch.inputs, batch.targets);
  }
  e.loss = sum / static_cast<double>(config_.eval_batches);
  if (auto* task = dynamic_cast<loom::data::AdditionTask*>(held_out_.get())) {
    e.metric_name = "exact-match accuracy";
    e.metric = addition_accuracy(model, *task, config_.batch, e.sample);
  } else if (with_sample && bpe_) {  // a document's start, as the shards mark it
    const auto out = loom::nn::generate(model, {{*bpe_->special_id("<|endoftext|>")}},
                                        {.max_new_tokens = 100, .temperature = 0.8f});
    std::vector<std::int32_t> ids = out.front();
    std::erase_if(ids, [&](std::int32_t id) { return id >= bpe_->vocab_size(); });  // the model's padding ids
    e.sample = bpe_->decode(ids);
  } else if (with_sample) {
    const loom::data::ByteTokenizer bytes;
    const auto out = loom::nn::generate(model, {bytes.encode("\n")}, {.max_new_tokens = 200, .temperature = 0.8f});
    if (model.config().vocab_size <= 256) e.sample = bytes.decode(out.front());
    else e.sample = "(token ids: give --tokenizer to read them)";
  }
  return e;
}

std::vector<std::string> RunData::files() const {
  std::vector<std::string> paths;
  if (shards_) {
    for (std::size_t i = 0; i < shards_->shards(); ++i) paths.push_back(shards_->shard(i).path());
  } else if (config_.data.starts_with("text:")) {
    paths.push_back(config_.data.substr(5));
  }
  return paths;
}

}  // namespace train_gpt
