// train_gpt's data: the training source and the held-out evaluation of the chosen --data.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "loom/data/batch_source.hpp"
#include "loom/data/bpe_tokenizer.hpp"
#include "loom/data/prefetcher.hpp"
#include "loom/data/shard_stream.hpp"
#include "loom/nn/gpt.hpp"
#include "run_config.hpp"

namespace train_gpt {

struct Evaluation {
  double loss = 0;
  std::string metric_name;  // empty when the data has no task metric
  double metric = 0;
  std::string sample;       // a short generated sample, readable
};

class RunData {
 public:
  // partition: this rank's share of the training data (every rank evaluates on the same held-out data).
  RunData(const RunConfig& config, loom::data::Partition partition);
  loom::data::BatchSource& train() { return *train_; }
  // Whether the loader keeps up: the batches the steps waited for since the last call.
  loom::data::LoaderStats take_loader_stats() { return train_->take_stats(); }
  // "data: 3 llm.c shards (12.0M tokens, mapped), 11718 windows of 1025 tokens, shuffled per epoch; 1302 held out"
  // or empty for the other sources.
  const std::string& description() const { return description_; }
  // The data files the run reads (the shards, or the text file; none for the addition task).
  std::vector<std::string> files() const;
  // Held-out loss over config.eval_batches batches, the task metric and a sample.
  Evaluation evaluate(loom::nn::GPT& model, bool with_sample);

 private:
  RunConfig config_;
  std::unique_ptr<loom::data::ShardSet> shards_;  // mapped for the run (streaming sources read it)
  std::unique_ptr<loom::data::Prefetcher> train_;
  std::unique_ptr<loom::data::BatchSource> held_out_;
  std::string description_;
  std::unique_ptr<loom::data::BpeTokenizer> bpe_;  // --tokenizer: samples decoded with it
  std::int64_t steps_ = 0;
};

}  // namespace train_gpt
