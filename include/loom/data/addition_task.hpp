// The built-in synthetic task: multi-digit addition written as bytes, which a small GPT visibly
// learns in minutes on a CPU, so nothing has to be downloaded. A problem with 2 digits reads
// "07+45=250\n": both operands zero-padded to `digits`, then the sum's digits + 1 digits in
// reverse order (least significant first, the order in which carries are computed), then a
// newline. Rows pack whole problems; only the answer digits and the newline carry loss (the
// operands are random and cannot be predicted). Problem i is a pure function of (seed, i).
#pragma once

#include <cstdint>
#include <string>

#include "loom/data/batch_source.hpp"

namespace loom::data {

struct AdditionTaskOptions {
  int digits = 2;
  std::uint64_t seed = 1;
};

struct AdditionProblem {
  std::int64_t a = 0, b = 0;
  std::string prompt;  // "07+45="
  std::string answer;  // "250\n"
};

class AdditionTask : public BatchSource {
 public:
  AdditionTask(const AdditionTaskOptions& options, std::int64_t batch, std::int64_t steps, Partition partition = {});

  Batch next() override;
  std::int64_t position() const override { return position_; }
  void seek(std::int64_t position) override;
  std::int64_t vocab_size() const override { return 256; }

  // Training problems are indexed from 0; held-out problems for evaluation from 2^40, so the
  // two streams never share an index.
  AdditionProblem problem(std::uint64_t index) const;
  static constexpr std::uint64_t held_out_base = std::uint64_t{1} << 40;
  std::int64_t problem_length() const noexcept { return 3 * options_.digits + 4; }  // "ab+cd=" + "sum\n"

 private:
  AdditionTaskOptions options_;
  std::int64_t batch_, steps_, per_row_;
  Partition partition_;
  std::int64_t position_ = 0;
};

}  // namespace loom::data
