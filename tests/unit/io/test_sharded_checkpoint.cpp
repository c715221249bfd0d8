// loom-checkpoint-2 (src/io/sharded_checkpoint.cpp): every rank writes its own pieces, and any
// layout loads any other. Checked here: one process restores every value and state tensor bit for
// bit; a 2-rank ZeRO-2 and a 2-rank ZeRO-3 checkpoint load at 3 ranks with ZeRO-1 and in one
// process into exactly the values and the (gathered) optimizer state that were saved; and each
// kind of damage (a flipped byte in a piece, a truncated or missing file, a wrong digest in
// state.json, a piece table with a gap) is its own named error, from the load or from
// verify_checkpoint (what resume runs first), and a refused load leaves the model as it was.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "loom/comm/in_process.hpp"
#include "loom/core/error.hpp"
#include "loom/io/checkpoint.hpp"
#include "loom/io/checkpoint_tools.hpp"
#include "loom/io/files.hpp"
#include "loom/io/piece_file.hpp"
#include "loom/optim/adamw.hpp"
#include "loom/optim/state_io.hpp"
#include "loom/shard/zero.hpp"
#include "loom/topo/mesh.hpp"
#include "loom/train/trainer.hpp"
#include "src/io/sharded_checkpoint.hpp"
#include "support/file_damage.hpp"
#include "support/ddp_equivalence.hpp"
#include "support/error_message.hpp"
#include "support/tiny_gpt.hpp"

namespace fs = std::filesystem;
using loom::Tensor;

using loom::test::flip_byte;

namespace {

loom::nn::GPTConfig tiny() { return loom::test::tiny_gpt(64, 8); }

using loom::test::tiny_trainer_options;

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("loom_test_sharded_" + name);
  fs::remove_all(dir);
  return dir;
}

std::vector<std::vector<unsigned char>> bytes_of(const loom::model::ParameterSpace& space) {
  std::vector<std::vector<unsigned char>> out;
  for (const loom::model::Parameter* p : space.parameters()) {
    const Tensor v = p->value().to(loom::Device::cpu());
    const auto* b = static_cast<const unsigned char*>(v.raw_data());
    out.emplace_back(b, b + v.nbytes());
  }
  return out;
}

std::map<std::string, std::vector<float>> state_of(const std::vector<loom::optim::StateTensor>& state) {
  std::map<std::string, std::vector<float>> out;
  for (const auto& t : state) out[t.name] = t.tensor.to_vector<float>();
  return out;
}

// Rewrites state.json's record of `file` to its current size and CRC-32 (as a forger would).
void rerecord(const fs::path& dir, const std::string& file) {
  nlohmann::json manifest = nlohmann::json::parse(loom::io::read_file((dir / "state.json").string()));
  const loom::io::FileDigest d = loom::io::digest_file((dir / file).string());
  manifest["files"][file] = {{"bytes", d.bytes}, {"crc32", d.crc32}};
  loom::io::write_file_atomically((dir / "state.json").string(), manifest.dump(2));
}

}  // namespace

TEST_CASE("a sharded checkpoint restores every tensor, and each kind of damage is named and changes nothing", "[io][sharded]") {
  const fs::path run = fresh_dir("one");
  loom::nn::GPT model(tiny(), loom::nn::Precision::bf16(), loom::Device::cpu(), 3);
  loom::test::GlobalBatchSlice data(4, 0, 4);
  loom::train::Trainer trainer(model, data, tiny_trainer_options(0));
  trainer.step();
  trainer.step();
  const std::string saved = trainer.save(run.string()).where;
  CHECK(fs::exists(fs::path(saved) / "rank_00000.safetensors"));
  CHECK_FALSE(fs::exists(fs::path(saved) / "model.safetensors"));
  CHECK(loom::io::verify_checkpoint(saved) == 2);

  loom::nn::GPT restored(tiny(), loom::nn::Precision::bf16(), loom::Device::cpu(), 99);
  loom::optim::AdamW optimizer(restored.parameter_space(), {});
  CHECK(loom::io::load_checkpoint(saved, restored, optimizer).step == 2);
  CHECK(bytes_of(restored.parameter_space()) == bytes_of(model.parameter_space()));
  CHECK(state_of(optimizer.state_tensors()) == state_of(trainer.optimizer().state_tensors()));
  CHECK(optimizer.steps_taken() == 2);

  // Each damage on a copy of the checkpoint; the model it is loaded into must not change.
  const fs::path file = "rank_00000.safetensors";
  auto damaged = [&](const std::string& name, const auto& harm) {
    const fs::path copy = run / name;
    fs::copy(saved, copy, fs::copy_options::recursive);
    harm(copy);
    loom::nn::GPT untouched(tiny(), loom::nn::Precision::bf16(), loom::Device::cpu(), 7);
    loom::optim::AdamW untouched_optimizer(untouched.parameter_space(), {});
    const auto before = bytes_of(untouched.parameter_space());
    const std::string load = loom::test::error_message(
        [&] { loom::io::load_checkpoint(copy.string(), untouched, untouched_optimizer); });
    const std::string verify = loom::test::error_message([&] { loom::io::verify_checkpoint(copy.string()); });
    if (load != "no error") {  // a refused load changed nothing
      CHECK(bytes_of(untouched.parameter_space()) == before);
      CHECK(untouched_optimizer.steps_taken() == 0);
    }
    return std::make_pair(load, verify);
  };
  const auto flipped = damaged("flipped", [&](const fs::path& dir) { flip_byte(dir / file, fs::file_size(dir / file) - 7); });
  CHECK_THAT(flipped.first, Catch::Contains("rank_00000.safetensors': entry '") && Catch::Contains("the file is damaged"));
  CHECK_THAT(flipped.second, Catch::Contains("rank_00000.safetensors' is damaged: CRC-32"));
  const auto truncated = damaged("truncated", [&](const fs::path& dir) { fs::resize_file(dir / file, 1000); });
  CHECK_THAT(truncated.first, Catch::Contains("bytes, not the") && Catch::Contains("(truncated)"));
  const auto missing = damaged("missing", [&](const fs::path& dir) { fs::remove(dir / file); });
  CHECK_THAT(missing.first, Catch::Contains("rank_00000.safetensors' is missing"));
  CHECK_THAT(missing.second, Catch::Contains("rank_00000.safetensors' is missing"));
  CHECK_THAT(truncated.second, Catch::Contains("(truncated)"));
  const auto digest = damaged("digest", [&](const fs::path& dir) {
    nlohmann::json manifest = nlohmann::json::parse(loom::io::read_file((dir / "state.json").string()));
    manifest["files"]["rank_00000.safetensors"]["crc32"] = 12345;
    loom::io::write_file_atomically((dir / "state.json").string(), manifest.dump(2));
  });
  // The pieces are intact, so a load (which checks each piece it reads, not whole files) succeeds;
  // the digest is checked where a checkpoint is chosen (verify_checkpoint, which resume runs).
  CHECK(digest.first == "no error");
  CHECK_THAT(digest.second, Catch::Contains("is damaged: CRC-32") && Catch::Contains("expected 12345"));
  const auto gap = damaged("gap", [&](const fs::path& dir) {  // the file rewritten without one piece
    loom::io::PieceFile original((dir / file).string());
    std::vector<loom::io::StoredPiece> kept;
    for (std::size_t i = 0; i < original.pieces().size(); ++i) {
      if (original.pieces()[i].piece.tensor != "wpe") kept.push_back({original.pieces()[i].piece, original.read(i)});
    }
    loom::io::write_piece_file((dir / file).string(), kept);
    rerecord(dir, file.string());
  });
  CHECK_THAT(gap.first, Catch::Contains("has no tensor 'wpe'"));
  CHECK(gap.second == "no error");  // a consistent checkpoint of another model: refused when loaded
  const auto hole = damaged("hole", [&](const fs::path& dir) {  // one piece cut short: a gap inside a tensor
    loom::io::PieceFile original((dir / file).string());
    std::vector<loom::io::StoredPiece> kept;
    for (std::size_t i = 0; i < original.pieces().size(); ++i) {
      loom::io::StoredPiece p{original.pieces()[i].piece, original.read(i)};
      if (p.piece.tensor == "wpe") {
        p.piece.end -= 1;
        p.data = p.data.slice(0, p.piece.numel());
      }
      kept.push_back(p);
    }
    loom::io::write_piece_file((dir / file).string(), kept);
    rerecord(dir, file.string());
  });
  CHECK_THAT(hole.first, Catch::Contains("pieces of 'wpe'") && Catch::Contains("uncovered"));
  CHECK_THAT(hole.second, Catch::Contains("pieces of 'wpe'") && Catch::Contains("uncovered"));
}

TEST_CASE("what each rank writes: its own pieces, 1/N of each replicated one, and an empty tensor once", "[io][sharded]") {
  using loom::io::detail::HeldPiece;
  const Tensor ten = Tensor::zeros({10}, loom::DType::f32), none = Tensor::empty({0}, loom::DType::f32);
  std::vector<std::vector<std::string>> written(3);
  for (int rank = 0; rank < 3; ++rank) {
    const std::vector<HeldPiece> held{
        {loom::io::Piece{"all", loom::Shape{10}, {0}, loom::Shape{10}, 0, 10}, ten, 3, rank},
        {loom::io::Piece{"mine", loom::Shape{40}, {0}, loom::Shape{40}, 10, 20}, ten, 1, 0},
        {loom::io::Piece{"empty", loom::Shape{0}, {0}, loom::Shape{0}, 0, 0}, none, 3, rank}};
    for (const HeldPiece& h : loom::io::detail::owned_pieces(held)) {
      written[static_cast<std::size_t>(rank)].push_back(h.piece.tensor + "[" + std::to_string(h.piece.begin) + "," +
                                                        std::to_string(h.piece.end) + ")");
      CHECK(h.target.numel() == h.piece.numel());
    }
  }
  CHECK(written[0] == std::vector<std::string>{"all[0,3)", "mine[10,20)", "empty[0,0)"});
  CHECK(written[1] == std::vector<std::string>{"all[3,6)", "mine[10,20)"});
  CHECK(written[2] == std::vector<std::string>{"all[6,10)", "mine[10,20)"});
}

TEST_CASE("a 2-rank ZeRO-2 or ZeRO-3 checkpoint loads at 3 ranks with ZeRO-1 and in one process", "[io][sharded]") {
  for (const int saved_stage : {2, 3}) {
    INFO("saved with ZeRO-" << saved_stage);
    const fs::path run = fresh_dir("zero" + std::to_string(saved_stage));
    std::vector<std::vector<unsigned char>> saved_values;
    std::map<std::string, std::vector<float>> saved_state;
    std::string saved_dir;
    loom::comm::run_in_process(2, [&](loom::comm::Communicator& comm) {
      loom::nn::GPT model(tiny(), loom::nn::Precision::fp32(), loom::Device::cpu(), 3,
                          loom::shard::space_layout(saved_stage, &comm));
      loom::test::GlobalBatchSlice data(4, 2 * comm.rank(), 2);
      loom::train::Trainer trainer(model, data, tiny_trainer_options(saved_stage), &comm);
      trainer.step();
      trainer.step();
      const std::string dir = trainer.save(run.string()).where;
      const auto state = loom::optim::gather_state(trainer.optimizer(), &comm);
      if (saved_stage == 3) trainer.zero_engine()->unshard_values();  // the whole model, to compare
      if (comm.rank() == 0) {
        saved_dir = dir;
        saved_values = bytes_of(model.parameter_space());
        saved_state = state_of(state);
      }
    });
    REQUIRE(fs::exists(fs::path(saved_dir) / "rank_00001.safetensors"));
    std::vector<std::string> problems(3);
    loom::comm::run_in_process(3, [&](loom::comm::Communicator& comm) {
      loom::nn::GPT model(tiny(), loom::nn::Precision::fp32(), loom::Device::cpu(), 8);
      loom::test::GlobalBatchSlice data(6, 2 * comm.rank(), 2);
      loom::train::Trainer trainer(model, data, tiny_trainer_options(1), &comm);
      loom::io::load_checkpoint(saved_dir, model, trainer.optimizer());
      const auto state = state_of(loom::optim::gather_state(trainer.optimizer(), &comm));
      std::string& problem = problems[static_cast<std::size_t>(comm.rank())];
      if (bytes_of(model.parameter_space()) != saved_values) problem += "values differ; ";
      if (comm.rank() == 0 && state != saved_state) problem += "optimizer state differs; ";
    });
    for (const std::string& problem : problems) CHECK(problem.empty());
    loom::nn::GPT alone(tiny(), loom::nn::Precision::fp32(), loom::Device::cpu(), 9);
    loom::optim::AdamW optimizer(alone.parameter_space(), {});
    loom::io::load_checkpoint(saved_dir, alone, optimizer);
    CHECK(bytes_of(alone.parameter_space()) == saved_values);
    CHECK(state_of(optimizer.state_tensors()) == saved_state);
  }
}

TEST_CASE("the ranks of a job verify the candidates together, each its part, and choose as one process does",
          "[io][sharded][resume]") {
  const fs::path run = fresh_dir("search_together");
  loom::comm::run_in_process(2, [&](loom::comm::Communicator& comm) {
    loom::nn::GPT model(tiny(), loom::nn::Precision::fp32(), loom::Device::cpu(), 3, loom::shard::space_layout(1, &comm));
    loom::test::GlobalBatchSlice data(4, 2 * comm.rank(), 2);
    loom::train::Trainer trainer(model, data, tiny_trainer_options(1), &comm);
    for (int s = 0; s < 3; ++s) {
      trainer.step();
      trainer.save(run.string());
    }
  });
  const fs::path damaged = run / "step_00000003" / "rank_00001.safetensors";
  flip_byte(damaged, fs::file_size(damaged) - 10);
  // Split in two parts, the damage is in part 1's file alone: each part reads only its own.
  const std::string newest = (run / "step_00000003").string();
  CHECK(loom::io::verify_checkpoint(newest, 0, 2) == 3);
  CHECK_THAT(loom::test::error_message([&] { loom::io::verify_checkpoint(newest, 1, 2); }),
             Catch::Contains("rank_00001.safetensors") && Catch::Contains("damaged"));
  CHECK_THAT(loom::test::error_message([&] { loom::io::verify_checkpoint(newest, 2, 2); }),
             Catch::Contains("part 2 of 2 does not exist"));
  const loom::io::CheckpointSearch alone = loom::io::find_resumable_checkpoint(run.string());
  REQUIRE(alone.chosen == (run / "step_00000002").string());
  REQUIRE(alone.skipped.size() == 1);
  std::vector<loom::io::CheckpointSearch> together(3);
  loom::comm::run_in_process(3, [&](loom::comm::Communicator& comm) {
    together[static_cast<std::size_t>(comm.rank())] = loom::io::find_resumable_checkpoint(run.string(), comm);
  });
  for (const loom::io::CheckpointSearch& search : together) {
    CHECK(search.chosen == alone.chosen);
    CHECK(search.step == 2);
    CHECK(search.any);
    CHECK(search.skipped == alone.skipped);  // rank 1 read the damaged file and named it, for everyone
  }
}

TEST_CASE("a checkpoint saved at TP 2 x DP 2 loads at TP 1 x DP 1 and TP 1 x DP 4, and the reverse, bit for bit",
          "[io][sharded][tensor_parallel]") {
  // The same model and optimizer state written from every layout consolidates to the same bytes,
  // and each loaded model computes the saved one's loss on a batch.
  const loom::nn::GPTConfig c = loom::test::tiny_gpt(37, 8);  // 37 ids padded to 64: 32 per tensor rank
  const fs::path root = fresh_dir("tensor_parallel");
  struct Layout {
    int world, tensor, zero;
  };
  // Trains (resumed from `from` when given) at a layout, saves into `run`, and returns the loss of a
  // fixed batch (the same on every rank).
  auto run_at = [&](const Layout layout, const std::string& from, const fs::path& run, int steps) {
    std::vector<float> next(static_cast<std::size_t>(layout.world));
    auto body = [&](loom::comm::Communicator* world) {
      std::unique_ptr<loom::topo::DeviceMesh> mesh;
      if (world != nullptr) mesh = std::make_unique<loom::topo::DeviceMesh>(*world, loom::topo::MeshOptions{.tensor = layout.tensor});
      loom::comm::Communicator* data = mesh ? &mesh->data() : nullptr;
      loom::comm::Communicator* tensor = mesh ? &mesh->tensor() : nullptr;
      loom::nn::GPT model(c, loom::nn::Precision::fp32(), loom::Device::cpu(), from.empty() ? 5 : 77,
                          loom::shard::space_layout(layout.zero, data), tensor);
      const int data_ranks = mesh ? mesh->shape().data : 1, d = mesh ? mesh->coords().data : 0;
      loom::test::GlobalBatchSlice batches(4, 4 * d / data_ranks, 4 / data_ranks);
      loom::train::Trainer trainer(model, batches, tiny_trainer_options(layout.zero), {world, data, tensor});
      if (!from.empty()) REQUIRE(trainer.resume(from));
      for (int s = 0; s < steps; ++s) trainer.step();
      trainer.save(run.string());
      // The loss of one fixed batch, the whole of it on every rank.
      loom::test::GlobalBatchSlice fixed(4, 0, 4);
      fixed.seek(9);
      const loom::data::Batch b = fixed.next();
      next[world != nullptr ? static_cast<std::size_t>(world->rank()) : 0] = model.forward(b.inputs, b.targets);
    };
    if (layout.world == 1) {
      body(nullptr);
    } else {
      loom::comm::run_in_process(layout.world, [&](loom::comm::Communicator& world) { body(&world); });
    }
    for (const float loss : next) CHECK(loss == next.front());
    return next.front();
  };
  auto consolidated = [&](const fs::path& run, const std::string& name) {
    const fs::path out = root / name;
    loom::io::consolidate_checkpoint(*loom::io::latest_checkpoint(run.string()), out.string());
    return std::vector<std::string>{loom::io::read_file((out / "model.safetensors").string()),
                                    loom::io::read_file((out / "optimizer.safetensors").string())};
  };
  const float saved_next = run_at({4, 2, 1}, "", root / "tp2_dp2", 2);
  const auto want = consolidated(root / "tp2_dp2", "tp2_dp2.whole");
  struct Load {
    Layout layout;
    const char* from;
    const char* to;
  };
  for (const Load load : {Load{{1, 1, 0}, "tp2_dp2", "tp1_dp1"}, Load{{4, 1, 1}, "tp2_dp2", "tp1_dp4"},
                          Load{{4, 2, 3}, "tp1_dp4", "tp2_dp2_zero3"}, Load{{2, 2, 0}, "tp1_dp1", "tp2_dp1"}}) {
    INFO("loaded from " << load.from << " at world " << load.layout.world << ", tensor " << load.layout.tensor
                        << ", ZeRO-" << load.layout.zero);
    const float next = run_at(load.layout, (root / load.from).string(), root / load.to, 0);
    CHECK(std::fabs(next - saved_next) <= 1e-5f * std::fabs(saved_next));
    CHECK(consolidated(root / load.to, std::string(load.to) + ".whole") == want);
  }
}

TEST_CASE("saving a tensor-parallel model over its data group instead of the world is refused by name on every rank",
          "[io][sharded][tensor_parallel]") {
  const fs::path run = fresh_dir("tensor_parallel_wrong_group");
  std::vector<std::string> errors(4);
  loom::comm::run_in_process(4, [&](loom::comm::Communicator& world) {
    const loom::topo::DeviceMesh mesh(world, {.tensor = 2});
    loom::nn::GPT model(loom::test::tiny_gpt(37, 8), loom::nn::Precision::fp32(), loom::Device::cpu(), 5, {},
                        &mesh.tensor());
    loom::optim::AdamW optimizer(model.parameter_space(), {});
    errors[static_cast<std::size_t>(world.rank())] = loom::test::error_message([&] {
      loom::io::save_checkpoint(run.string(), model, optimizer, {}, &mesh.data());
    });
  });
  for (const std::string& e : errors) CHECK_THAT(e, Catch::Contains("save over the world communicator"));
  CHECK_FALSE(loom::io::latest_checkpoint(run.string()));
}
