// The vocabulary-parallel embedding and cross-entropy (nn/vocab_parallel.hpp) over 1, 2 and 4
// in-process ranks against one process: 37 real ids padded to 48 (the 4-rank split leaves the
// last block 1 real id and 11 of padding). Each rank's embedding block is initialised to its rows
// of the whole table (the same seed and name); the lookup is the whole table's, bit for bit, and
// the gradient of each block is the fp64 scatter-add of its rows. The loss from the column blocks
// of padded logits (the padding holds large values that must not count) is nn::CrossEntropyLoss's
// on the real columns, and each block's gradient is that loss's gradient's columns, with 0 in
// padding and ignored rows.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "loom/comm/in_process.hpp"
#include "loom/model/parameter_space.hpp"
#include "loom/nn/loss.hpp"
#include "loom/nn/vocab_parallel.hpp"
#include "support/error_message.hpp"

using loom::DType;
using loom::Tensor;

namespace {

constexpr std::int64_t vocab = 37, padded = 48, channels = 6, rows = 7;

Tensor random_f32(const loom::Shape& shape, unsigned seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  Tensor t = Tensor::empty(shape, DType::f32);
  for (float& v : t.span<float>()) v = dist(rng);
  return t;
}

std::string differs(const char* what, const std::vector<float>& got, const std::vector<double>& want, double tol) {
  if (got.size() != want.size()) return std::string(what) + ": sizes differ; ";
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::fabs(got[i] - want[i]) > tol * (1.0 + std::fabs(want[i]))) {
      return std::string(what) + " differs at " + std::to_string(i) + "; ";
    }
  }
  return "";
}

}  // namespace

TEST_CASE("vocabulary blocks cover the padded vocabulary once", "[nn][vocab_parallel]") {
  const loom::nn::VocabBlock last = loom::nn::vocab_block(vocab, padded, 3, 4);
  CHECK(last.first == 36);
  CHECK(last.rows == 12);
  CHECK(last.valid == 1);
  CHECK(loom::nn::vocab_block(vocab, 64, 3, 4).valid == 0);  // padding only
  CHECK_THAT(loom::test::error_message([] { loom::nn::vocab_block(vocab, padded, 0, 5); }),
             Catch::Contains("48 does not divide into 5 blocks"));
}

TEST_CASE("the vocabulary-parallel embedding and cross-entropy equal one process's", "[nn][vocab_parallel]") {
  const loom::nn::Precision fp32 = loom::nn::Precision::fp32();
  // The whole table, from the seed, as one process makes it.
  loom::nn::Parameter whole("wte", loom::Shape{padded, channels}, DType::f32, loom::Device::cpu(), true);
  whole.set_init(loom::model::Init::normal(0.02f));
  loom::model::ParameterSpace whole_space({{"embedding", {&whole}}});
  whole_space.initialize(3);
  const std::vector<float> table = whole.value().to_vector<float>();
  const std::vector<std::int32_t> token_ids = {0, 36, 5, 5, 18, 19, 36, 2, 5, 30, 11, 12};
  const Tensor tokens = Tensor::from_vector(token_ids, {2, 6});
  const Tensor dout = random_f32({2, 6, channels}, 4, 1.0f);
  std::vector<double> lookup;
  for (const std::int32_t t : token_ids) {
    for (std::int64_t c = 0; c < channels; ++c) lookup.push_back(table[static_cast<std::size_t>(t * channels + c)]);
  }
  // The loss of one process on the real columns, with an ignored row.
  const Tensor logits = random_f32({rows, padded}, 5, 3.0f);
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t j = vocab; j < padded; ++j) logits.data<float>()[r * padded + j] = 1e4f;  // padding
  }
  const std::vector<std::int32_t> target_ids = {3, 36, -1, 0, 18, 35, 36};
  const Tensor targets = Tensor::from_vector(target_ids, {rows});
  Tensor real = Tensor::empty({rows, vocab}, DType::f32);
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t j = 0; j < vocab; ++j) real.data<float>()[r * vocab + j] = logits.data<float>()[r * padded + j];
  }
  loom::nn::CrossEntropyLoss reference;
  const float loss = reference.forward(real, targets);
  const std::vector<float> gradient = reference.backward(2.0f).to_vector<float>();
  for (const int ranks : {1, 2, 4}) {
    std::vector<std::string> problems(static_cast<std::size_t>(ranks));
    loom::comm::run_in_process(ranks, [&](loom::comm::Communicator& tensor) {
      std::string& problem = problems[static_cast<std::size_t>(tensor.rank())];
      loom::nn::VocabParallelEmbedding embedding("wte", vocab, padded, channels, fp32, loom::Device::cpu(), tensor);
      std::vector<loom::nn::Parameter*> mine;
      embedding.collect_parameters(mine);
      loom::model::ParameterSpace space({{"embedding", mine}});
      space.initialize(3);
      const loom::nn::VocabBlock b = embedding.block();
      const std::vector<float> block_values = embedding.weight().value().to_vector<float>();
      if (block_values != std::vector<float>(table.begin() + b.first * channels,
                                             table.begin() + (b.first + b.rows) * channels)) {
        problem += "init; ";
      }
      problem += differs("lookup", embedding.forward(tokens).to_vector<float>(), lookup, 0.0);
      embedding.backward(dout);
      std::vector<double> grad(static_cast<std::size_t>(b.rows * channels), 0.0);
      for (std::size_t i = 0; i < token_ids.size(); ++i) {
        const std::int64_t row = token_ids[i] - b.first;
        if (row < 0 || row >= b.rows) continue;
        for (std::int64_t c = 0; c < channels; ++c) {
          grad[static_cast<std::size_t>(row * channels + c)] += dout.data<float>()[static_cast<std::int64_t>(i) * channels + c];
        }
      }
      problem += differs("embedding grad", embedding.weight().grad().to_vector<float>(), grad, 1e-6);
      // This rank's columns of the padded logits.
      Tensor cols = Tensor::empty({rows, b.rows}, DType::f32);
      for (std::int64_t r = 0; r < rows; ++r) {
        for (std::int64_t j = 0; j < b.rows; ++j) cols.data<float>()[r * b.rows + j] = logits.data<float>()[r * padded + b.first + j];
      }
      loom::nn::VocabParallelCrossEntropy ce(vocab, b, tensor);
      const float got = ce.forward(cols, targets);
      if (std::fabs(got - loss) > 1e-6 * std::fabs(loss)) problem += "loss " + std::to_string(got) + "; ";
      if (ce.counted_rows() != 6) problem += "counted rows; ";
      std::vector<double> want;
      for (std::int64_t r = 0; r < rows; ++r) {
        for (std::int64_t j = 0; j < b.rows; ++j) {
          const std::int64_t id = b.first + j;
          want.push_back(id < vocab ? gradient[static_cast<std::size_t>(r * vocab + id)] : 0.0);
        }
      }
      problem += differs("logit grad", ce.backward(2.0f).to_vector<float>(), want, 1e-6);
    });
    INFO(ranks << " ranks");
    CHECK(problems == std::vector<std::string>(static_cast<std::size_t>(ranks)));
  }
}
