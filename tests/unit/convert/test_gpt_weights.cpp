// convert::GPTWeights into models: the list of a GPT's tensors against a real model's parameters,
// and load_gpt_weights against initialisation, which by design makes every rank's part of a
// parameter exactly as one process makes the whole: weights taken from a one-process model of
// seed A and loaded into a model of another seed equal, bit for bit, a model of seed A built the
// same way, in one process, under a ZeRO-3 layout (each rank's slices), over a tensor group of 2
// in-process ranks (each rank's blocks) and in bf16 (rounded once). Bad weights are named.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <vector>

#include "loom/comm/in_process.hpp"
#include "loom/convert/gpt_weights.hpp"
#include "loom/core/error.hpp"
#include "loom/nn/gpt.hpp"

using loom::Tensor;
using loom::convert::GPTWeights;

namespace {

loom::nn::GPTConfig config() {
  loom::nn::GPTConfig c;
  c.vocab_size = 37;  // padded to 64
  c.context = 8;
  c.layers = 2;
  c.heads = 4;
  c.channels = 32;
  return c;
}

// A one-process fp32 model's weights, as host copies.
GPTWeights weights_of_seed(std::uint64_t seed) {
  loom::nn::GPT model(config(), loom::nn::Precision::fp32(), loom::Device::cpu(), seed);
  GPTWeights w{config(), {}, "a model of seed " + std::to_string(seed)};
  for (const loom::model::Parameter* p : model.parameters()) w.tensors[p->name()] = p->value().clone();
  return w;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.numel() == b.numel() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

}  // namespace

TEST_CASE("gpt_tensor_shapes lists a GPT's parameters, names, shapes and order", "[convert]") {
  loom::nn::GPTConfig c = config();
  c.layers = 3;
  const loom::nn::GPT model(c, loom::nn::Precision::fp32(), loom::Device::cpu());
  const auto shapes = loom::convert::gpt_tensor_shapes(c);
  REQUIRE(shapes.size() == model.parameters().size());
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    INFO(model.parameters()[i]->name());
    CHECK(shapes[i].first == model.parameters()[i]->name());
    CHECK(shapes[i].second == model.parameters()[i]->shape());
  }
}

TEST_CASE("load_gpt_weights sets a model to the weights, in one process, under ZeRO-3 and in bf16", "[convert]") {
  const GPTWeights weights = weights_of_seed(5);
  SECTION("one process") {
    loom::nn::GPT loaded(config(), loom::nn::Precision::fp32(), loom::Device::cpu(), 99);
    loom::convert::load_gpt_weights(loaded, weights);
    for (const loom::model::Parameter* p : loaded.parameters()) {
      INFO(p->name());
      CHECK(same_bits(p->value(), weights.tensors.at(p->name())));
    }
    CHECK(loaded.parameter_space().value_origin() == "loaded from a model of seed 5");
  }
  SECTION("each rank's slices of a ZeRO-3 layout") {
    for (int rank = 0; rank < 3; ++rank) {
      const loom::model::SpaceLayout layout{.ranks = 3, .rank = rank, .values = loom::model::ValueMode::sharded};
      loom::nn::GPT loaded(config(), loom::nn::Precision::fp32(), loom::Device::cpu(), 99, layout);
      const loom::nn::GPT expected(config(), loom::nn::Precision::fp32(), loom::Device::cpu(), 5, layout);
      loom::convert::load_gpt_weights(loaded, weights);
      INFO("rank " << rank);
      CHECK(same_bits(loaded.parameter_space().local_values(), expected.parameter_space().local_values()));
    }
  }
  SECTION("bf16, rounded once as initialisation rounds") {
    loom::nn::GPT loaded(config(), loom::nn::Precision::bf16(), loom::Device::cpu(), 99);
    const loom::nn::GPT expected(config(), loom::nn::Precision::bf16(), loom::Device::cpu(), 5);
    loom::convert::load_gpt_weights(loaded, weights);
    CHECK(same_bits(loaded.parameter_space().values(), expected.parameter_space().values()));
  }
}

TEST_CASE("load_gpt_weights gives each rank of a tensor group its blocks", "[convert]") {
  const GPTWeights weights = weights_of_seed(5);
  // Catch's assertions are not thread-safe: each rank lists the parameters it compared and those
  // that differ, checked after the ranks end.
  std::vector<std::size_t> compared(2, 0);
  std::vector<std::vector<std::string>> differing(2);
  loom::comm::run_in_process(2, [&](loom::comm::Communicator& tensor) {
    const auto rank = static_cast<std::size_t>(tensor.rank());
    loom::nn::GPT loaded(config(), loom::nn::Precision::fp32(), loom::Device::cpu(), 99, {}, &tensor);
    const loom::nn::GPT expected(config(), loom::nn::Precision::fp32(), loom::Device::cpu(), 5, {}, &tensor);
    loom::convert::load_gpt_weights(loaded, weights);
    for (std::size_t i = 0; i < loaded.parameters().size(); ++i) {
      ++compared[rank];
      if (!same_bits(loaded.parameters()[i]->value(), expected.parameters()[i]->value()))
        differing[rank].push_back(loaded.parameters()[i]->name());
    }
  });
  for (std::size_t rank = 0; rank < 2; ++rank) {
    INFO("rank " << rank);
    CHECK(compared[rank] == loom::nn::GPT(config(), loom::nn::Precision::fp32(), loom::Device::cpu()).parameters().size());
    CHECK(differing[rank].empty());
  }
}

TEST_CASE("Bad weights are refused by name", "[convert]") {
  const GPTWeights good = weights_of_seed(5);
  loom::nn::GPT model(config(), loom::nn::Precision::fp32(), loom::Device::cpu(), 99);
  auto refused = [&](const GPTWeights& w, const std::string& expected) {
    try {
      loom::convert::load_gpt_weights(model, w);
      FAIL("accepted, expected: " << expected);
    } catch (const loom::Error& error) {
      CHECK_THAT(error.what(), Catch::Contains(expected));
    }
  };
  GPTWeights w = good;
  w.tensors.erase("h1.mlp.fc.bias");
  refused(w, "no tensor 'h1.mlp.fc.bias'");
  w = good;
  w.tensors["h0.attn.qkv.weight"] = Tensor::zeros({32, 96}, loom::DType::f32);
  refused(w, "tensor 'h0.attn.qkv.weight' is (32, 96) but a GPT of width 32");
  w = good;
  w.tensors["h2.ln1.weight"] = Tensor::zeros({32}, loom::DType::f32);
  refused(w, "tensor 'h2.ln1.weight' is no parameter of a GPT with 2 layers");
  w = good;
  w.tensors["wpe"] = Tensor::zeros({8, 32}, loom::DType::bf16);
  refused(w, "is bf16 but the others are f32");
  w = good;
  w.tensors["wte"] = Tensor::zeros({64, 32}, loom::DType::i32);
  refused(w, "is i32, not a float");
  w = good;
  w.config.layers = 1;
  w.tensors.erase("h1.ln1.weight");
  refused(w, "no parameter of a GPT with 1 layers");
  loom::nn::GPTConfig other = config();
  other.context = 16;
  loom::nn::GPT longer(other, loom::nn::Precision::fp32(), loom::Device::cpu());
  CHECK_THROWS_WITH(loom::convert::load_gpt_weights(longer, good),
                    Catch::Contains("have context = 8 but the model has 16"));
}
