// Hugging Face GPT-2 directories, crafted here with loom's safetensors writer: Conv1D weights
// transposed (element (i, j) of c_attn is element (j, i) of loom's qkv), the vocabulary padded,
// names with or without "transformer.", the causal-mask buffers skipped, a tied lm_head accepted;
// the export read back bit for bit; and each config or tensor that disagrees named.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "loom/convert/hf_gpt2.hpp"
#include "loom/core/error.hpp"
#include "loom/io/files.hpp"
#include "loom/io/safetensors.hpp"

using loom::Tensor;
using nlohmann::json;

namespace {

namespace fs = std::filesystem;

constexpr std::int64_t vocab = 5, context = 3, width = 4, layers = 2;

// A tensor whose element i is value_base + i.
Tensor counting(const loom::Shape& shape, float base) {
  std::vector<float> values(static_cast<std::size_t>(shape.numel()));
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = base + static_cast<float>(i);
  return Tensor::from_vector(values, shape);
}

json gpt2_config() {
  return {{"model_type", "gpt2"}, {"vocab_size", vocab}, {"n_positions", context}, {"n_embd", width},
          {"n_layer", layers}, {"n_head", 2}, {"activation_function", "gelu_new"}, {"layer_norm_epsilon", 1e-5}};
}

std::vector<loom::io::NamedTensor> gpt2_tensors(const std::string& prefix) {
  const std::int64_t c = width;
  std::vector<loom::io::NamedTensor> t{{prefix + "wte.weight", counting({vocab, c}, 1000)},
                                       {prefix + "wpe.weight", counting({context, c}, 2000)},
                                       {prefix + "ln_f.weight", counting({c}, 3000)},
                                       {prefix + "ln_f.bias", counting({c}, 3100)}};
  for (std::int64_t l = 0; l < layers; ++l) {
    const std::string h = prefix + "h." + std::to_string(l) + ".";
    const float b = 10000.0f * static_cast<float>(l + 1);
    for (const auto& [name, shape] : std::vector<std::pair<std::string, loom::Shape>>{
             {"ln_1.weight", {c}}, {"ln_1.bias", {c}}, {"attn.c_attn.weight", {c, 3 * c}},
             {"attn.c_attn.bias", {3 * c}}, {"attn.c_proj.weight", {c, c}}, {"attn.c_proj.bias", {c}},
             {"ln_2.weight", {c}}, {"ln_2.bias", {c}}, {"mlp.c_fc.weight", {c, 4 * c}}, {"mlp.c_fc.bias", {4 * c}},
             {"mlp.c_proj.weight", {4 * c, c}}, {"mlp.c_proj.bias", {c}}}) {
      t.push_back({h + name, counting(shape, b + static_cast<float>(t.size()) * 100)});
    }
  }
  return t;
}

struct Dir {
  std::string path;
  explicit Dir(const std::string& name) : path((fs::temp_directory_path() / name).string()) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~Dir() { fs::remove_all(path); }
  void write(const json& config, const std::vector<loom::io::NamedTensor>& tensors) const {
    loom::io::write_file_atomically(path + "/config.json", config.dump());
    loom::io::write_safetensors(path + "/model.safetensors", tensors, {{"format", "pt"}});
  }
};

const Tensor& find(const std::vector<loom::io::NamedTensor>& tensors, const std::string& name) {
  for (const auto& t : tensors) {
    if (t.name == name) return t.tensor;
  }
  FAIL("no " << name);
  throw;
}

}  // namespace

TEST_CASE("A Hugging Face GPT-2 directory becomes loom's names and layouts", "[convert]") {
  const Dir dir("loom_test_hf_read");
  auto tensors = gpt2_tensors("transformer.");
  tensors.push_back({"lm_head.weight", find(tensors, "transformer.wte.weight")});  // tied
  tensors.push_back({"transformer.h.0.attn.bias", Tensor::zeros({1, 1, context, context}, loom::DType::f32)});
  dir.write(gpt2_config(), tensors);
  const auto w = loom::convert::read_hf_gpt2(dir.path);
  CHECK(w.config.vocab_size == vocab);
  CHECK(w.config.layers == layers);
  CHECK(w.origin == "hf:" + dir.path);
  const Tensor& hf_qkv = find(tensors, "transformer.h.1.attn.c_attn.weight");  // [C, 3C]
  const Tensor& qkv = w.tensors.at("h1.attn.qkv.weight");                       // [3C, C]
  REQUIRE(qkv.shape() == loom::Shape{12, 4});
  for (std::int64_t i = 0; i < 4; ++i) {
    for (std::int64_t j = 0; j < 12; ++j) CHECK(qkv.at<float>({j, i}) == hf_qkv.at<float>({i, j}));
  }
  CHECK(w.tensors.at("h0.mlp.proj.weight").at<float>({1, 7}) ==
        find(tensors, "transformer.h.0.mlp.c_proj.weight").at<float>({7, 1}));
  CHECK(w.tensors.at("h1.ln2.bias").at<float>({2}) == find(tensors, "transformer.h.1.ln_2.bias").at<float>({2}));
  const Tensor& wte = w.tensors.at("wte");
  REQUIRE(wte.shape() == loom::Shape{64, 4});
  CHECK(wte.at<float>({4, 3}) == 1019.0f);
  CHECK(wte.at<float>({5, 0}) == 0.0f);

  SECTION("names without \"transformer.\", as OpenAI's checkpoints on the Hub have them") {
    const Dir bare("loom_test_hf_bare");
    bare.write(gpt2_config(), gpt2_tensors(""));
    const auto b = loom::convert::read_hf_gpt2(bare.path);
    for (const auto& [name, tensor] : w.tensors) {
      INFO(name);
      CHECK(std::memcmp(tensor.raw_data(), b.tensors.at(name).raw_data(), tensor.nbytes()) == 0);
    }
  }
  SECTION("written back and read again, bit for bit") {
    const Dir out("loom_test_hf_write");
    loom::convert::write_hf_gpt2(w, out.path);
    const auto written = loom::io::read_safetensors(out.path + "/model.safetensors").tensors;
    CHECK(written.size() == gpt2_tensors("").size());
    CHECK_FALSE(written.contains("lm_head.weight"));
    for (const auto& t : gpt2_tensors("transformer.")) {
      INFO(t.name);
      REQUIRE(written.contains(t.name));
      CHECK(written.at(t.name).shape() == t.tensor.shape());
      CHECK(std::memcmp(written.at(t.name).raw_data(), t.tensor.raw_data(), t.tensor.nbytes()) == 0);
    }
    const json config = json::parse(loom::io::read_file(out.path + "/config.json"));
    CHECK(config["n_embd"] == width);
    CHECK(config["architectures"][0] == "GPT2LMHeadModel");
    CHECK(config["tie_word_embeddings"] == true);
    loom::io::write_file_atomically(out.path + "/pytorch_model.bin", "another model");
    CHECK_THROWS_WITH(loom::convert::write_hf_gpt2(w, out.path), Catch::Contains("already holds pytorch_model.bin"));
  }
}

TEST_CASE("A Hugging Face directory that is not loom's GPT-2 is named", "[convert]") {
  const Dir dir("loom_test_hf_bad");
  auto refused = [&](const std::function<void(json&, std::vector<loom::io::NamedTensor>&)>& change,
                     const std::string& expected) {
    json config = gpt2_config();
    auto tensors = gpt2_tensors("transformer.");
    change(config, tensors);
    dir.write(config, tensors);
    try {
      loom::convert::read_hf_gpt2(dir.path);
      FAIL("accepted, expected: " << expected);
    } catch (const loom::Error& error) {
      CHECK_THAT(error.what(), Catch::Contains(expected));
    }
  };
  using T = std::vector<loom::io::NamedTensor>;
  refused([](json& c, T&) { c["model_type"] = "llama"; }, "model_type is \"llama\"; loom imports GPT-2 models");
  refused([](json& c, T&) { c["activation_function"] = "relu"; }, "activation_function is \"relu\"");
  refused([](json& c, T&) { c["layer_norm_epsilon"] = 1e-6; }, "layer_norm_epsilon is 1e-06 but loom's LayerNorm uses 1e-5");
  refused([](json& c, T&) { c["n_inner"] = 8; }, "n_inner is 8 but loom's MLP is 4 n_embd = 16 wide");
  refused([](json& c, T&) { c["scale_attn_by_inverse_layer_idx"] = true; }, "does not scale attention by layer");
  refused([](json& c, T&) { c["n_layer"] = 3; }, "has no tensor 'h.2.ln_1.weight'");
  refused([](json& c, T&) { c["n_positions"] = 4; },
          "tensor 'transformer.wpe.weight' is (3, 4) but config.json (n_embd 4, n_layer 2, n_positions 4, vocab_size 5)");
  refused([](json& c, T&) { c.erase("n_embd"); }, "has no n_embd");
  refused([](json&, T& t) { t.push_back({"transformer.h.0.attn.extra", Tensor::zeros({2}, loom::DType::f32)}); },
          "holds tensor 'transformer.h.0.attn.extra', which a GPT-2");
  refused([](json&, T& t) { t.push_back({"lm_head.weight", Tensor::zeros({vocab, width}, loom::DType::f32)}); },
          "lm_head.weight differs from wte");
  refused([](json&, T& t) { t.push_back({"h.0.ln_1.weight", Tensor::zeros({width}, loom::DType::f32)}); },
          "holds 'h.0.ln_1.weight' twice");
  fs::remove(dir.path + "/model.safetensors");
  loom::io::write_file_atomically(dir.path + "/pytorch_model.bin", "pickle");
  CHECK_THROWS_WITH(loom::convert::read_hf_gpt2(dir.path), Catch::Contains("safe_serialization=True"));
}
