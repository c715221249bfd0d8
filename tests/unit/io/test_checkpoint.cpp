// safetensors files (layout, round trip, every kind of damage) and training checkpoints: a save
// restores every tensor bit for bit, damaged files and mismatched configs are refused with named
// errors, an interrupted save leaves the previous checkpoint and `latest` intact, and resuming is
// exact: N steps + save + load + M steps equals N + M uninterrupted steps bit for bit.
#include <catch2/catch.hpp>
#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "loom/core/numeric.hpp"
#include "loom/data/addition_task.hpp"
#include "loom/data/prefetcher.hpp"
#include "loom/io/checkpoint.hpp"
#include "loom/io/files.hpp"
#include "loom/io/safetensors.hpp"
#include "loom/optim/sgd.hpp"
#include "loom/train/trainer.hpp"
#include "src/io/checkpoint_manifest.hpp"
#include "support/file_damage.hpp"
#include "support/tensor_checks.hpp"
#include "support/tiny_gpt.hpp"

using loom::DType;
using loom::ErrorCategory;
using loom::Tensor;
using loom::test::IsError;
namespace fs = std::filesystem;

using loom::test::flip_byte;

namespace {

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("loom_test_io_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

loom::nn::GPTConfig tiny() { return loom::test::tiny_gpt(256, 24); }

loom::train::TrainerOptions trainer_options(
    loom::train::TrainerOptions::OptimizerKind kind = loom::train::TrainerOptions::OptimizerKind::adamw) {
  loom::train::TrainerOptions o;
  o.optimizer = kind;
  o.grad_accumulation = 2;
  o.schedule = {.max_lr = 3e-3f, .min_lr = 3e-4f, .warmup = 2, .total = 8};
  o.data_seed = 5;
  return o;
}

std::unique_ptr<loom::data::BatchSource> task_data() {
  return std::make_unique<loom::data::Prefetcher>(
      std::make_unique<loom::data::AdditionTask>(loom::data::AdditionTaskOptions{.digits = 2, .seed = 5}, 3, 24));
}

std::vector<std::vector<float>> weights(const loom::nn::GPT& model) {
  std::vector<std::vector<float>> out;
  for (const loom::nn::Parameter* p : model.parameters()) out.push_back(p->value().to_vector<float>());
  return out;
}

}  // namespace

TEST_CASE("safetensors: standard layout, round trip of every dtype, metadata", "[io]") {
  const fs::path file = fresh_dir("st") / "a.safetensors";
  Tensor f = Tensor::from_vector(std::vector<float>{1.5f, -2.0f, 3.25f, 0.0f, 7.0f, 8.0f}, {2, 3});
  Tensor b = Tensor::empty({3}, DType::bf16);
  for (int i = 0; i < 3; ++i) b.data<loom::bfloat16>()[i] = loom::to_bfloat16(static_cast<float>(i) - 0.5f);
  Tensor i32 = Tensor::from_vector(std::vector<std::int32_t>{-7, 9}, {2});
  Tensor empty = Tensor::empty({0, 4}, DType::f32);
  loom::io::write_safetensors(file.string(), {{"w", f}, {"b", b}, {"i", i32}, {"e", empty}}, {{"k", "v"}});
  // 8-byte little-endian header length, a JSON header padded to 8 bytes, then the data.
  const std::string bytes = loom::io::read_file(file.string());
  std::uint64_t length = 0;
  for (int k = 0; k < 8; ++k) length |= static_cast<std::uint64_t>(static_cast<unsigned char>(bytes[k])) << (8 * k);
  REQUIRE(length % 8 == 0);
  REQUIRE(bytes.size() == 8 + length + 24 + 6 + 8);
  const std::string header = bytes.substr(8, length);
  REQUIRE(header.find("\"w\":{\"data_offsets\":[0,24],\"dtype\":\"F32\",\"shape\":[2,3]}") != std::string::npos);
  REQUIRE(header.find("\"b\":{\"data_offsets\":[24,30],\"dtype\":\"BF16\",\"shape\":[3]}") != std::string::npos);
  REQUIRE(header.find("\"__metadata__\":{\"k\":\"v\"}") != std::string::npos);

  const loom::io::SafetensorsContents back = loom::io::read_safetensors(file.string());
  REQUIRE(back.metadata.at("k") == "v");
  REQUIRE(back.tensors.at("w").to_vector<float>() == f.to_vector<float>());
  REQUIRE(back.tensors.at("w").shape() == f.shape());
  REQUIRE(back.tensors.at("b").dtype() == DType::bf16);
  REQUIRE(back.tensors.at("b").data<loom::bfloat16>()[2].bits == b.data<loom::bfloat16>()[2].bits);
  REQUIRE(back.tensors.at("i").to_vector<std::int32_t>() == i32.to_vector<std::int32_t>());
  REQUIRE(back.tensors.at("e").shape() == empty.shape());

  fs::resize_file(file, fs::file_size(file) - 3);
  REQUIRE_THROWS_MATCHES(loom::io::read_safetensors(file.string()), loom::Error,
                         IsError(ErrorCategory::corrupt_data, {"truncated"}));
  fs::resize_file(file, 5);
  REQUIRE_THROWS_MATCHES(loom::io::read_safetensors(file.string()), loom::Error,
                         IsError(ErrorCategory::corrupt_data, {"shorter than the 8-byte header"}));
  loom::io::write_safetensors(file.string(), {{"w", f}});
  flip_byte(file, 9);  // inside the JSON
  REQUIRE_THROWS_MATCHES(loom::io::read_safetensors(file.string()), loom::Error,
                         IsError(ErrorCategory::corrupt_data, {file.string()}));
}

TEST_CASE("CRC-32 is the zlib one", "[io]") {
  const std::string text = "123456789";
  REQUIRE(loom::io::crc32(std::span(reinterpret_cast<const unsigned char*>(text.data()), text.size())) == 0xCBF43926u);
}

TEST_CASE("consolidated checkpoints restore every tensor, refuse damage and other configs, survive a crashed save", "[io]") {
  const fs::path run = fresh_dir("ckpt");
  auto data = task_data();
  loom::nn::GPT model(tiny(), loom::nn::Precision::bf16(), loom::Device::cpu(), 3);
  loom::train::Trainer trainer(model, *data, trainer_options());
  trainer.step();
  trainer.step();
  const std::string saved = loom::io::save_checkpoint(run.string(), model, trainer.optimizer(), trainer.progress(),
                                                      nullptr, loom::io::CheckpointLayout::consolidated);
  REQUIRE(fs::path(saved).filename() == "step_00000002");
  REQUIRE(loom::io::latest_checkpoint(run.string()) == saved);

  auto other_data = task_data();
  loom::nn::GPT restored(tiny(), loom::nn::Precision::bf16(), loom::Device::cpu(), 99);
  loom::train::Trainer other(restored, *other_data, trainer_options());
  const loom::io::TrainingProgress progress = loom::io::load_checkpoint(run.string(), restored, other.optimizer());
  REQUIRE(progress.step == 2);
  REQUIRE(progress.batches_consumed == 4);  // 2 steps x 2 micro-batches
  for (std::size_t i = 0; i < model.parameters().size(); ++i) {
    const Tensor& a = model.parameters()[i]->value();
    const Tensor& b = restored.parameters()[i]->value();
    REQUIRE(std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0);
  }
  const auto saved_state = trainer.optimizer().state_tensors(), loaded_state = other.optimizer().state_tensors();
  REQUIRE(saved_state.size() == 3 * model.parameters().size());  // moments and a master per bf16 parameter
  for (std::size_t i = 0; i < saved_state.size(); ++i) {
    INFO(saved_state[i].name);
    REQUIRE(loaded_state[i].name == saved_state[i].name);
    REQUIRE(loaded_state[i].tensor.to_vector<float>() == saved_state[i].tensor.to_vector<float>());
  }
  REQUIRE(other.optimizer().steps_taken() == 2);

  // A save that crashed before its rename leaves a temporary directory and nothing else.
  fs::create_directories(run / ".step_00000003.tmp");
  std::ofstream(run / ".step_00000003.tmp" / "model.safetensors") << "partial";
  REQUIRE(loom::io::latest_checkpoint(run.string()) == saved);
  REQUIRE_NOTHROW(loom::io::load_checkpoint(run.string(), restored, other.optimizer()));

  loom::nn::GPTConfig wider = tiny();
  wider.channels = 32;
  loom::nn::GPT mismatched(wider, loom::nn::Precision::bf16(), loom::Device::cpu());
  loom::optim::AdamW mismatched_optimizer(mismatched.parameter_space(), {});
  REQUIRE_THROWS_MATCHES(loom::io::load_checkpoint(saved, mismatched, mismatched_optimizer), loom::Error,
                         IsError(ErrorCategory::invalid_argument, {"channels = 16", "the model has 32"}));
  loom::nn::GPT fp32(tiny(), loom::nn::Precision::fp32(), loom::Device::cpu());
  loom::optim::AdamW fp32_optimizer(fp32.parameter_space(), {});
  REQUIRE_THROWS_MATCHES(loom::io::load_checkpoint(saved, fp32, fp32_optimizer), loom::Error,
                         IsError(ErrorCategory::invalid_argument, {"trained in bf16"}));
  loom::optim::SGD sgd(restored.parameter_space(), {});
  REQUIRE_THROWS_MATCHES(loom::io::load_checkpoint(saved, restored, sgd), loom::Error,
                         IsError(ErrorCategory::invalid_argument, {"holds adamw state", "uses sgd"}));

  flip_byte(fs::path(saved) / "model.safetensors", fs::file_size(fs::path(saved) / "model.safetensors") - 10);
  REQUIRE_THROWS_MATCHES(loom::io::load_checkpoint(saved, restored, other.optimizer()), loom::Error,
                         IsError(ErrorCategory::corrupt_data, {"model.safetensors", "damaged", "CRC-32"}));
  fs::resize_file(fs::path(saved) / "optimizer.safetensors", 100);
  REQUIRE_THROWS_MATCHES(loom::io::load_checkpoint(saved, restored, other.optimizer()), loom::Error,
                         IsError(ErrorCategory::corrupt_data, {"damaged"}));
}

TEST_CASE("re-saving a step keeps `latest` valid, and a refused checkpoint leaves the run untouched", "[io]") {
  const fs::path run = fresh_dir("resave");
  auto data = task_data();
  loom::nn::GPT model(tiny(), loom::nn::Precision::fp32(), loom::Device::cpu(), 3);
  loom::optim::SGD no_momentum(model.parameter_space(), {.momentum = 0.0f});
  const loom::io::TrainingProgress progress{.step = 4};
  const std::string first = loom::io::save_checkpoint(run.string(), model, no_momentum, progress);
  const std::string again = loom::io::save_checkpoint(run.string(), model, no_momentum, progress);
  REQUIRE(first == again);
  REQUIRE(loom::io::latest_checkpoint(run.string()) == first);
  REQUIRE_FALSE(fs::exists(run / ".step_00000004.old"));
  REQUIRE(loom::io::load_checkpoint(run.string(), model, no_momentum).step == 4);

  loom::nn::GPT other(tiny(), loom::nn::Precision::fp32(), loom::Device::cpu(), 8);
  const std::vector<std::vector<float>> before = weights(other);
  loom::optim::SGD with_momentum(other.parameter_space(), {.momentum = 0.9f});
  REQUIRE_THROWS_MATCHES(loom::io::load_checkpoint(run.string(), other, with_momentum), loom::Error,
                         IsError(ErrorCategory::invalid_argument, {"has no tensor '", "momentum_buffer'"}));
  REQUIRE(weights(other) == before);
}

TEST_CASE("a non-finite gradient skips the step in any precision and leaves the weights alone", "[io][train]") {
  auto data = task_data();
  loom::nn::GPT model(tiny(), loom::nn::Precision::fp32(), loom::Device::cpu(), 3);
  loom::train::Trainer trainer(model, *data, trainer_options());
  model.parameters().back()->value().data<float>()[0] = std::numeric_limits<float>::infinity();  // ln_f.bias
  const std::vector<std::vector<float>> before = weights(model);
  const loom::train::StepResult r = trainer.step();
  REQUIRE(r.skipped);
  REQUIRE_FALSE(std::isfinite(r.grad_norm));
  REQUIRE(trainer.skipped_steps() == 1);
  REQUIRE(trainer.progress().skipped_steps == 1);
  REQUIRE(trainer.optimizer().steps_taken() == 0);
  REQUIRE(weights(model) == before);
}

TEST_CASE("resume is exact: N steps, save, load, M steps equals N + M steps bit for bit (fp32, CPU)", "[io][resume]") {
  using Kind = loom::train::TrainerOptions::OptimizerKind;
  const Kind kind = GENERATE(Kind::adamw, Kind::sgd);
  INFO((kind == Kind::adamw ? "adamw" : "sgd"));
  const fs::path run = fresh_dir("resume");
  const int n = 3, m = 3;
  std::vector<float> straight_losses;
  auto data = task_data();
  loom::nn::GPT straight(tiny(), loom::nn::Precision::fp32(), loom::Device::cpu(), 7);
  loom::train::Trainer straight_trainer(straight, *data, trainer_options(kind));
  for (int i = 0; i < n + m; ++i) straight_losses.push_back(straight_trainer.step().loss);

  {
    auto first_data = task_data();
    loom::nn::GPT first(tiny(), loom::nn::Precision::fp32(), loom::Device::cpu(), 7);
    loom::train::Trainer first_trainer(first, *first_data, trainer_options(kind));
    for (int i = 0; i < n; ++i) REQUIRE(first_trainer.step().loss == straight_losses[static_cast<std::size_t>(i)]);
    loom::io::save_checkpoint(run.string(), first, first_trainer.optimizer(), first_trainer.progress());
  }  // the first process ends

  auto resumed_data = task_data();
  loom::nn::GPT resumed(tiny(), loom::nn::Precision::fp32(), loom::Device::cpu(), 12345);  // other init
  loom::train::Trainer resumed_trainer(resumed, *resumed_data, trainer_options(kind));
  resumed_trainer.restore(loom::io::load_checkpoint(run.string(), resumed, resumed_trainer.optimizer()));
  for (int i = n; i < n + m; ++i) {
    const loom::train::StepResult r = resumed_trainer.step();
    REQUIRE(r.step == i + 1);
    REQUIRE(r.loss == straight_losses[static_cast<std::size_t>(i)]);
  }
  REQUIRE(weights(resumed) == weights(straight));
}

TEST_CASE("resume finds the newest checkpoint that verifies, whatever `latest` says, and says why", "[io][resume]") {
  const fs::path dir = fresh_dir("search");
  CHECK_FALSE(loom::io::find_resumable_checkpoint((dir / "absent").string()).any);
  fs::create_directories(dir / ".step_00000009.tmp");  // an interrupted save is no checkpoint
  CHECK_FALSE(loom::io::find_resumable_checkpoint(dir.string()).any);
  loom::nn::GPT model(tiny(), loom::nn::Precision::fp32(), loom::Device::cpu(), 3);
  auto data = task_data();
  loom::train::Trainer trainer(model, *data, trainer_options());
  for (int i = 0; i < 3; ++i) {
    trainer.step();
    trainer.save(dir.string());
  }
  loom::io::write_file_atomically((dir / "latest").string(), "step_00000002\n");  // behind the newest
  loom::io::CheckpointSearch search = loom::io::find_resumable_checkpoint(dir.string());
  CHECK(search.chosen == (dir / "step_00000003").string());
  CHECK(search.step == 3);
  CHECK(search.skipped.empty());
  const fs::path newest = dir / "step_00000003" / "rank_00000.safetensors";
  flip_byte(newest, fs::file_size(newest) - 10);  // in a piece's data
  fs::remove(dir / "latest");
  search = loom::io::find_resumable_checkpoint(dir.string());
  CHECK(search.chosen == (dir / "step_00000002").string());
  REQUIRE(search.skipped.size() == 2);
  CHECK(search.skipped[0] == "'latest' is missing");
  CHECK_THAT(search.skipped[1], Catch::Contains("step_00000003") && Catch::Contains("damaged"));
  auto resumed_data = task_data();
  loom::nn::GPT resumed(tiny(), loom::nn::Precision::fp32(), loom::Device::cpu(), 4);
  loom::train::Trainer resumed_trainer(resumed, *resumed_data, trainer_options());
  const loom::train::Trainer::ResumeOutcome outcome = resumed_trainer.resume(dir.string());
  CHECK(outcome.checkpoint == (dir / "step_00000002").string());
  CHECK(resumed_trainer.steps_done() == 2);
  // Nothing verifies: an error listing every candidate, and the run untouched.
  for (const char* step : {"step_00000001", "step_00000002"}) {
    flip_byte(dir / step / "rank_00000.safetensors", fs::file_size(dir / step / "rank_00000.safetensors") - 50);
  }
  loom::nn::GPT untouched(tiny(), loom::nn::Precision::fp32(), loom::Device::cpu(), 4);
  auto untouched_data = task_data();
  loom::train::Trainer untouched_trainer(untouched, *untouched_data, trainer_options());
  CHECK_THROWS_MATCHES(untouched_trainer.resume(dir.string()), loom::Error,
                       IsError(ErrorCategory::corrupt_data, {"none verifies", "step_00000001", "step_00000002",
                                                             "step_00000003"}));
  CHECK(untouched_trainer.steps_done() == 0);
}

TEST_CASE("retention keeps the newest N, every k-th and `latest`, and stale temporaries go", "[io]") {
  const fs::path dir = fresh_dir("prune");
  loom::nn::GPT model(tiny(), loom::nn::Precision::fp32(), loom::Device::cpu(), 3);
  auto data = task_data();
  loom::train::Trainer trainer(model, *data, trainer_options());
  for (int i = 0; i < 7; ++i) {
    trainer.step();
    trainer.save(dir.string());
  }
  loom::io::write_file_atomically((dir / "latest").string(), "step_00000001\n");
  const std::vector<std::string> removed = loom::io::prune_checkpoints(dir.string(), 2, 3);
  std::vector<std::string> left;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().filename().string().starts_with("step_")) left.push_back(entry.path().filename().string());
  }
  std::sort(left.begin(), left.end());
  // newest 2: 7, 6; multiples of 3: 3, 6; `latest`: 1.
  CHECK(left == std::vector<std::string>{"step_00000001", "step_00000003", "step_00000006", "step_00000007"});
  CHECK(removed.size() == 3);
  CHECK_THROWS_MATCHES(loom::io::prune_checkpoints(dir.string(), 0), loom::Error,
                       IsError(ErrorCategory::invalid_argument, {"keep must be at least 1"}));
  fs::create_directories(dir / ".step_00000008.tmp");
  fs::create_directories(dir / ".step_00000007.old");
  fs::create_directories(dir / ".step_00000001.old");
  loom::io::write_file_atomically((dir / "latest").string(), ".step_00000001.old\n");  // a crash mid re-save
  const std::vector<std::string> stale = loom::io::remove_stale_temporaries(dir.string());
  CHECK(stale.size() == 2);
  CHECK_FALSE(fs::exists(dir / ".step_00000008.tmp"));
  CHECK_FALSE(fs::exists(dir / ".step_00000007.old"));
  CHECK(fs::exists(dir / ".step_00000001.old"));
}

TEST_CASE("a checkpoint's state.json is checked field by field before anything is read", "[io]") {
  const std::string good = R"({"format": "loom-checkpoint-1", "architecture": "gpt", "config": {"layers": 2},
    "precision": "fp32", "optimizer": "adamw", "optimizer_steps": 4, "step": 4, "batches_consumed": 8, "data_seed": 5,
    "loss_scaler": {"scale": 1.0, "clean_steps": 0, "skipped_steps": 0},
    "files": {"model.safetensors": {"bytes": 10, "crc32": 7}, "optimizer.safetensors": {"bytes": 20, "crc32": 4294967295}}})";
  const loom::io::detail::CheckpointManifest m = loom::io::detail::parse_manifest(good, "s.json");
  CHECK(m.progress.step == 4);
  CHECK(m.progress.batches_consumed == 8);
  CHECK(m.files.at("optimizer.safetensors").crc32 == 4294967295u);
  auto with = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    text.replace(text.find(from), from.size(), to);
    return text;
  };
  const std::vector<std::pair<std::string, std::string>> damaged = {
      {with("\"step\": 4", "\"step\": -4"), "'step' = -4"},
      {with("\"scale\": 1.0", "\"scale\": 0"), "loss_scaler.scale = 0"},
      {with("\"data_seed\": 5", "\"data_seed\": \"5\""), "'data_seed' = \"5\""},
      {with("\"crc32\": 7", "\"crc32\": 7.5"), "'crc32' = 7.5"},
      {with("\"files\"", "\"fils\""), "lacks the field 'files'"},
      {with("\"precision\": \"fp32\"", "\"precision\": 32"), "'precision' = 32"},
      {"[1, 2]", "is not a loom-checkpoint-1 or loom-checkpoint-2 checkpoint"},
      {"{", "is not valid JSON"},
  };
  for (const auto& [text, fragment] : damaged) {
    INFO(fragment);
    CHECK_THROWS_MATCHES(loom::io::detail::parse_manifest(text, "s.json"), loom::Error,
                         IsError(ErrorCategory::corrupt_data, {"s.json", fragment}));
  }
  // loom-checkpoint-2: one file per rank of the world that wrote it.
  const std::string sharded = with("\"format\": \"loom-checkpoint-1\"", "\"format\": \"loom-checkpoint-2\", \"world\": 2");
  auto files = [&](const std::string& list) {
    std::string text = sharded;
    const std::size_t at = text.find("\"files\"");
    return text.substr(0, at) + "\"tensors\": {\"model\": [\"w\"], \"optimizer\": [\"w.exp_avg\"]}, \"files\": " + list + "}";
  };
  const std::string two = R"({"rank_00000.safetensors": {"bytes": 10, "crc32": 1}, "rank_00001.safetensors": {"bytes": 12, "crc32": 2}})";
  const loom::io::detail::CheckpointManifest m2 = loom::io::detail::parse_manifest(files(two), "s.json");
  CHECK(m2.version == 2);
  CHECK(m2.world == 2);
  CHECK(m2.files.at("rank_00001.safetensors").bytes == 12);
  CHECK(m2.optimizer_tensors == std::vector<std::string>{"w.exp_avg"});
  CHECK_THROWS_MATCHES(loom::io::detail::parse_manifest(files(R"({"rank_00000.safetensors": {"bytes": 10, "crc32": 1}})"), "s.json"),
                       loom::Error, IsError(ErrorCategory::corrupt_data, {"lists 1 files for a world of 2 ranks"}));
  CHECK_THROWS_MATCHES(loom::io::detail::parse_manifest(files(R"({"rank_00000.safetensors": {"bytes": 10, "crc32": 1}, "rank_2.safetensors": {"bytes": 1, "crc32": 1}})"), "s.json"),
                       loom::Error, IsError(ErrorCategory::corrupt_data, {"lacks the field 'rank_00001.safetensors'"}));
  CHECK_THROWS_MATCHES(loom::io::detail::parse_manifest(with("\"format\": \"loom-checkpoint-1\"", "\"format\": \"loom-checkpoint-2\", \"world\": 0"), "s.json"),
                       loom::Error, IsError(ErrorCategory::corrupt_data, {"'world' = 0"}));
}

TEST_CASE("a checkpoint is owner-only, and a folder others may write into is refused", "[io]") {
  const fs::path run = fresh_dir("private");
  fs::remove(run);  // made by the save, owner-only
  loom::nn::GPT model(tiny(), loom::nn::Precision::fp32(), loom::Device::cpu(), 3);
  loom::optim::SGD sgd(model.parameter_space(), {.momentum = 0.9f});
  struct RestoreUmask {
    mode_t old;
    ~RestoreUmask() { ::umask(old); }
  };
  {
    const RestoreUmask restore{::umask(0)};  // a umask that would leave everything open
    loom::io::save_checkpoint(run.string(), model, sgd, {.step = 2});
  }
  std::vector<std::string> wrong;
  const auto check = [&](const fs::path& path) {
    const auto mode = fs::status(path).permissions() & fs::perms::mask;
    const auto want = fs::is_directory(path) ? fs::perms::owner_all : fs::perms::owner_read | fs::perms::owner_write;
    if (mode != want) wrong.push_back(path.string());
  };
  check(run);
  std::size_t files = 0;
  for (const fs::directory_entry& entry : fs::recursive_directory_iterator(run)) {
    check(entry.path());
    files += entry.is_regular_file() ? 1 : 0;
  }
  CHECK(files == 3);  // latest, state.json and this rank's file
  CHECK(wrong.empty());
  const fs::path open = fresh_dir("open");
  fs::permissions(open, fs::perms::all, fs::perm_options::replace);
  CHECK_THROWS_MATCHES(loom::io::save_checkpoint(open.string(), model, sgd, {.step = 2}), loom::Error,
                       IsError(ErrorCategory::invalid_argument, {"has mode 0777: others may write into it"}));
  CHECK(fs::is_empty(open));
}
