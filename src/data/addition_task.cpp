#include "loom/data/addition_task.hpp"

#include <algorithm>

#include "loom/core/error.hpp"

namespace loom::data {

namespace {

// SplitMix64: a counter-based generator, so any problem can be drawn without drawing the others.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::string padded(std::int64_t value, int width) {
  std::string s = std::to_string(value);
  return std::string(static_cast<std::size_t>(width) - s.size(), '0') + s;
}

}  // namespace

AdditionTask::AdditionTask(const AdditionTaskOptions& options, std::int64_t batch, std::int64_t steps,
                           Partition partition)
    : options_(options), batch_(batch), steps_(steps), partition_(partition) {
  partition.validate();
  require(options.digits >= 1 && options.digits <= 9, "addition task: digits must be in [1, 9], got ", options.digits);
  require(batch >= 1, "addition task: batch must be positive, got ", batch);
  per_row_ = (steps + 1) / problem_length();
  require(per_row_ >= 1, "addition task: sequence length ", steps, " cannot hold one ", problem_length(),
          "-token problem; use at least ", problem_length() - 1);
}

void AdditionTask::seek(std::int64_t position) {
  require(position >= 0, "addition task: position must be >= 0, got ", position);
  position_ = position;
}

AdditionProblem AdditionTask::problem(std::uint64_t index) const {
  std::int64_t limit = 1;
  for (int d = 0; d < options_.digits; ++d) limit *= 10;
  const std::uint64_t r = mix(options_.seed * 0x2545f4914f6cdd1dull ^ mix(index));
  AdditionProblem p;
  p.a = static_cast<std::int64_t>(r % static_cast<std::uint64_t>(limit));
  p.b = static_cast<std::int64_t>((r / static_cast<std::uint64_t>(limit)) % static_cast<std::uint64_t>(limit));
  p.prompt = padded(p.a, options_.digits) + "+" + padded(p.b, options_.digits) + "=";
  std::string sum = padded(p.a + p.b, options_.digits + 1);
  std::reverse(sum.begin(), sum.end());
  p.answer = sum + "\n";
  return p;
}

Batch AdditionTask::next() {
  Batch out{Tensor::empty({batch_, steps_}, DType::i32), Tensor::empty({batch_, steps_}, DType::i32)};
  const std::int64_t global = position_ * partition_.world + partition_.rank;
  for (std::int64_t row = 0; row < batch_; ++row) {
    // T + 1 bytes with a flag per byte: does predicting it carry loss?
    std::string text;
    std::string scored;
    const std::uint64_t first = static_cast<std::uint64_t>((global * batch_ + row) * per_row_);
    for (std::int64_t i = 0; i < per_row_; ++i) {
      const AdditionProblem p = problem(first + static_cast<std::uint64_t>(i));
      text += p.prompt + p.answer;
      scored += std::string(p.prompt.size(), '0') + std::string(p.answer.size(), '1');
    }
    text.resize(static_cast<std::size_t>(steps_ + 1), '\n');  // padding carries no loss
    scored.resize(static_cast<std::size_t>(steps_ + 1), '0');
    std::int32_t* tokens = out.inputs.data<std::int32_t>() + row * steps_;
    std::int32_t* targets = out.targets.data<std::int32_t>() + row * steps_;
    for (std::int64_t t = 0; t < steps_; ++t) {
      tokens[t] = static_cast<unsigned char>(text[static_cast<std::size_t>(t)]);
      const std::size_t next = static_cast<std::size_t>(t + 1);
      targets[t] = scored[next] == '1' ? static_cast<unsigned char>(text[next]) : -1;
    }
  }
  ++position_;
  return out;
}

}  // namespace loom::data
