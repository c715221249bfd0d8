// io::read_model_weights against the model that was saved: both checkpoint layouts and the
// weights file give the model's values bit for bit with its architecture, config and precision;
// a damaged model file and a file that is not loom's are named. (describe, consolidate and export
// are run by tests/examples/loom_ckpt.sh.)
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <string>

#include "loom/core/error.hpp"
#include "loom/io/checkpoint.hpp"
#include "loom/io/checkpoint_tools.hpp"
#include "loom/io/safetensors.hpp"
#include "loom/nn/gpt.hpp"
#include "loom/optim/adamw.hpp"
#include "support/file_damage.hpp"
#include "support/tiny_gpt.hpp"

namespace fs = std::filesystem;

TEST_CASE("read_model_weights gives a checkpoint's weights whole, from either layout and a weights file", "[io]") {
  const fs::path dir = fs::temp_directory_path() / "loom_test_read_model_weights";
  fs::remove_all(dir);
  loom::nn::GPT model(loom::test::tiny_gpt(37, 8), loom::nn::Precision::bf16(), loom::Device::cpu(), 3);
  loom::optim::AdamW optimizer(model.parameter_space(), {});
  auto same_as_model = [&](const loom::io::ModelWeights& w) {
    CHECK(w.architecture == "gpt");
    CHECK(w.precision == "bf16");
    CHECK(w.config.at("vocab_size") == 37);
    CHECK(w.config.at("context") == 8);
    REQUIRE(w.tensors.size() == model.parameters().size());
    for (const loom::model::Parameter* p : model.parameters()) {
      INFO(p->name());
      const loom::Tensor& t = w.tensors.at(p->name());
      CHECK(t.dtype() == loom::DType::bf16);
      CHECK(t.shape() == p->shape());
      CHECK(std::memcmp(t.raw_data(), p->value().raw_data(), t.nbytes()) == 0);
    }
  };
  const std::string sharded = loom::io::save_checkpoint((dir / "sharded").string(), model, optimizer, {});
  same_as_model(loom::io::read_model_weights(sharded));
  same_as_model(loom::io::read_model_weights((dir / "sharded").string()));  // the run's latest
  const std::string whole = loom::io::save_checkpoint((dir / "whole").string(), model, optimizer, {}, nullptr,
                                                      loom::io::CheckpointLayout::consolidated);
  const loom::io::ModelWeights read = loom::io::read_model_weights(whole);
  same_as_model(read);
  loom::io::write_model_weights((dir / "weights.safetensors").string(), read);
  same_as_model(loom::io::read_model_weights((dir / "weights.safetensors").string()));

  loom::test::flip_byte(fs::path(whole) / "model.safetensors", fs::file_size(fs::path(whole) / "model.safetensors") - 3);
  try {
    loom::io::read_model_weights(whole);
    FAIL("a damaged model.safetensors was read");
  } catch (const loom::Error& error) {
    CHECK(error.category() == loom::ErrorCategory::corrupt_data);
    CHECK_THAT(error.what(), Catch::Contains("model.safetensors' is damaged"));
  }
  loom::io::write_safetensors((dir / "other.safetensors").string(), {{"x", loom::Tensor::zeros({2}, loom::DType::f32)}});
  CHECK_THROWS_WITH(loom::io::read_model_weights((dir / "other.safetensors").string()),
                    Catch::Contains("is not a loom weights file"));
  CHECK_THROWS_WITH(loom::io::read_model_weights((dir / "nothing").string()), Catch::Contains("cannot open"));
  fs::remove_all(dir);
}
