// train_gpt's data: the training source and the held-out evaluation of the chosen --data.
#pragma once

#include <memory>
#include <string>

#include "loom/data/batch_source.hpp"
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
  // Held-out loss over config.eval_batches batches, the task metric and a sample.
  Evaluation evaluate(loom::nn::GPT& model, bool with_sample);

 private:
  RunConfig config_;
  std::unique_ptr<loom::data::BatchSource> train_, held_out_;
  std::int64_t steps_ = 0;
};

}  // namespace train_gpt
