// Encryption at rest of checkpoints (io/at_rest.hpp): files written with a process key are in
// loom's encrypted format and read back to the same bytes as a plain write; an encrypted run
// resumes bit for bit as a plain one does, in both layouts; and a missing or wrong key, a flipped
// byte, a truncated file and a plain file slipped into an encrypted checkpoint each fail by name
// with nothing loaded.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "loom/comm/in_process.hpp"
#include "loom/crypt/encrypted_file.hpp"
#include "loom/crypt/key.hpp"
#include "loom/data/addition_task.hpp"
#include "loom/data/prefetcher.hpp"
#include "loom/io/at_rest.hpp"
#include "loom/io/checkpoint.hpp"
#include "loom/io/checkpoint_tools.hpp"
#include "loom/io/files.hpp"
#include "loom/io/safetensors.hpp"
#include "loom/shard/zero.hpp"
#include "loom/train/trainer.hpp"
#include "support/ddp_equivalence.hpp"
#include "support/error_message.hpp"
#include "support/file_damage.hpp"
#include "support/tensor_checks.hpp"
#include "support/tiny_gpt.hpp"

namespace fs = std::filesystem;
using loom::ErrorCategory;
using loom::Tensor;
using loom::io::CheckpointLayout;
using loom::test::IsError;

namespace {

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("loom_test_at_rest_" + name);
  fs::remove_all(dir);
  return dir;
}

// Sets the process's key for the test's lifetime.
class KeyScope {
 public:
  explicit KeyScope(std::shared_ptr<const loom::crypt::SecretKey> key) { loom::io::set_at_rest_key(std::move(key)); }
  ~KeyScope() {
    loom::io::set_at_rest_key(nullptr);
    loom::io::set_plain_input_allowed(false);
  }
  KeyScope(const KeyScope&) = delete;
  KeyScope& operator=(const KeyScope&) = delete;
};

std::shared_ptr<const loom::crypt::SecretKey> new_key() {
  return std::make_shared<const loom::crypt::SecretKey>(loom::crypt::SecretKey::generate());
}

std::string file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

loom::train::TrainerOptions options() {
  loom::train::TrainerOptions o;
  o.grad_accumulation = 2;
  o.schedule = {.max_lr = 3e-3f, .min_lr = 3e-4f, .warmup = 2, .total = 8};
  o.data_seed = 5;
  return o;
}

std::unique_ptr<loom::data::BatchSource> task_data() {
  return std::make_unique<loom::data::Prefetcher>(
      std::make_unique<loom::data::AdditionTask>(loom::data::AdditionTaskOptions{.digits = 2, .seed = 5}, 3, 24));
}

std::vector<std::string> weights(const loom::nn::GPT& model) {
  std::vector<std::string> out;
  for (const loom::nn::Parameter* p : model.parameters()) {
    const Tensor& v = p->value();
    out.emplace_back(static_cast<const char*>(v.raw_data()), v.nbytes());
  }
  return out;
}

loom::nn::GPTConfig tiny() { return loom::test::tiny_gpt(256, 24); }

}  // namespace

TEST_CASE("a file written with a key is encrypted and reads back as the plain write's bytes", "[io][at_rest]") {
  const fs::path dir = fresh_dir("file");
  fs::create_directories(dir);
  Tensor w = Tensor::from_vector(std::vector<float>{1.5f, -2.0f, 3.25f, 1e-3f}, {2, 2});
  const loom::io::FileDigest plain = loom::io::write_safetensors((dir / "plain.safetensors").string(), {{"w", w}});
  const auto key = new_key();
  loom::io::FileDigest sealed;
  {
    KeyScope scope(key);
    sealed = loom::io::write_safetensors((dir / "sealed.safetensors").string(), {{"w", w}});
    // The digest is of the plaintext: the numbers a plain save records.
    CHECK(sealed.bytes == plain.bytes);
    CHECK(sealed.crc32 == plain.crc32);
    CHECK(loom::io::read_at_rest((dir / "sealed.safetensors").string()) == file_bytes(dir / "plain.safetensors"));
    CHECK(loom::io::plaintext_size((dir / "sealed.safetensors").string()) == plain.bytes);
    const loom::io::FileDigest d = loom::io::digest_at_rest((dir / "sealed.safetensors").string());
    CHECK((d.bytes == plain.bytes && d.crc32 == plain.crc32));
    CHECK(loom::io::read_safetensors((dir / "sealed.safetensors").string()).tensors.at("w").to_vector<float>() ==
          w.to_vector<float>());
  }
  // On disk: loom's format under that key, and not the plaintext's header.
  const loom::crypt::EncryptedFileInfo info = loom::crypt::inspect_encrypted_file((dir / "sealed.safetensors").string());
  CHECK(info.key_id == key->id());
  CHECK(info.plaintext_bytes == plain.bytes);
  CHECK(file_bytes(dir / "sealed.safetensors").find("\"dtype\"") == std::string::npos);
  // Without the key: named, with the id it needs.
  REQUIRE_THROWS_MATCHES(loom::io::read_at_rest((dir / "sealed.safetensors").string()), loom::Error,
                         IsError(ErrorCategory::invalid_argument, {"is encrypted (key id", key->id_hex(), "--key-file"}));
  // A plain file still reads with a key set.
  KeyScope other(new_key());
  CHECK(loom::io::read_at_rest((dir / "plain.safetensors").string()) == file_bytes(dir / "plain.safetensors"));
}

TEST_CASE("an encrypted run resumes bit for bit as a plain one, in both layouts", "[io][at_rest][resume]") {
  const CheckpointLayout layout = GENERATE(CheckpointLayout::sharded, CheckpointLayout::consolidated);
  INFO((layout == CheckpointLayout::sharded ? "sharded" : "consolidated"));
  const int n = 3, m = 3;
  auto data = task_data();
  loom::nn::GPT straight(tiny(), loom::nn::Precision::fp32(), loom::Device::cpu(), 7);
  loom::train::Trainer straight_trainer(straight, *data, options());
  std::vector<float> losses;
  for (int i = 0; i < n + m; ++i) losses.push_back(straight_trainer.step().loss);

  const fs::path run = fresh_dir("resume");
  KeyScope scope(new_key());
  std::string saved;
  {
    auto first_data = task_data();
    loom::nn::GPT first(tiny(), loom::nn::Precision::fp32(), loom::Device::cpu(), 7);
    loom::train::Trainer first_trainer(first, *first_data, options());
    for (int i = 0; i < n; ++i) first_trainer.step();
    saved = loom::io::save_checkpoint(run.string(), first, first_trainer.optimizer(), first_trainer.progress(), nullptr,
                                      layout);
  }
  // Every file of the checkpoint is encrypted; `latest` only names it.
  std::size_t files = 0;
  for (const fs::directory_entry& e : fs::directory_iterator(saved)) {
    INFO(e.path());
    CHECK(loom::crypt::is_encrypted_file(e.path().string()));
    ++files;
  }
  CHECK(files == (layout == CheckpointLayout::sharded ? 2u : 3u));  // state.json and the data
  CHECK(loom::io::verify_checkpoint(saved) == n);

  auto resumed_data = task_data();
  loom::nn::GPT resumed(tiny(), loom::nn::Precision::fp32(), loom::Device::cpu(), 12345);
  loom::train::Trainer resumed_trainer(resumed, *resumed_data, options());
  const loom::io::CheckpointSearch search = loom::io::find_resumable_checkpoint(run.string());
  REQUIRE(search.chosen == saved);
  resumed_trainer.restore(loom::io::load_checkpoint(*search.chosen, resumed, resumed_trainer.optimizer()));
  for (int i = n; i < n + m; ++i) REQUIRE(resumed_trainer.step().loss == losses[static_cast<std::size_t>(i)]);
  REQUIRE(weights(resumed) == weights(straight));
}

TEST_CASE("an encrypted checkpoint refuses a missing or wrong key, damage and a plain file by name, loading nothing",
          "[io][at_rest]") {
  const CheckpointLayout layout = GENERATE(CheckpointLayout::sharded, CheckpointLayout::consolidated);
  INFO((layout == CheckpointLayout::sharded ? "sharded" : "consolidated"));
  const std::string data_file = layout == CheckpointLayout::sharded ? "rank_00000.safetensors" : "model.safetensors";
  const fs::path run = fresh_dir("refuse");
  const auto key = new_key();
  auto data = task_data();
  loom::nn::GPT model(tiny(), loom::nn::Precision::fp32(), loom::Device::cpu(), 3);
  loom::train::Trainer trainer(model, *data, options());
  trainer.step();
  std::string saved;
  std::string plaintext;  // the data file as a plain save writes it
  {
    KeyScope scope(key);
    saved = loom::io::save_checkpoint(run.string(), model, trainer.optimizer(), trainer.progress(), nullptr, layout);
    plaintext = loom::io::read_at_rest((fs::path(saved) / data_file).string());
  }
  loom::nn::GPT other(tiny(), loom::nn::Precision::fp32(), loom::Device::cpu(), 8);
  loom::train::Trainer other_trainer(other, *data, options());
  const std::vector<std::string> before = weights(other);

  // No key: the error names the key id; the search does not pass over the checkpoint for it.
  REQUIRE_THROWS_MATCHES(loom::io::load_checkpoint(saved, other, other_trainer.optimizer()), loom::Error,
                         IsError(ErrorCategory::invalid_argument, {"state.json' is encrypted (key id", key->id_hex()}));
  REQUIRE_THROWS_MATCHES(loom::io::find_resumable_checkpoint(run.string()), loom::Error,
                         IsError(ErrorCategory::invalid_argument, {key->id_hex()}));
  {
    const auto wrong = new_key();
    KeyScope scope(wrong);
    REQUIRE_THROWS_MATCHES(loom::io::load_checkpoint(saved, other, other_trainer.optimizer()), loom::Error,
                           IsError(ErrorCategory::invalid_argument, {key->id_hex(), wrong->id_hex()}));
    REQUIRE_THROWS_MATCHES(loom::io::find_resumable_checkpoint(run.string()), loom::Error,
                           IsError(ErrorCategory::invalid_argument, {key->id_hex(), wrong->id_hex()}));
  }
  KeyScope scope(key);
  const fs::path file = fs::path(saved) / data_file;
  const std::string sealed = file_bytes(file);
  auto restore = [&] { std::ofstream(file, std::ios::binary | std::ios::trunc) << sealed; };

  loom::test::flip_byte(file, sealed.size() - 40);  // inside the last chunk's ciphertext
  REQUIRE_THROWS_MATCHES(loom::io::load_checkpoint(saved, other, other_trainer.optimizer()), loom::Error,
                         IsError(ErrorCategory::corrupt_data, {data_file, "chunk"}));
  CHECK(loom::io::find_resumable_checkpoint(run.string()).chosen == std::nullopt);
  restore();
  fs::resize_file(file, sealed.size() - 100);
  REQUIRE_THROWS_MATCHES(loom::io::load_checkpoint(saved, other, other_trainer.optimizer()), loom::Error,
                         IsError(ErrorCategory::corrupt_data, {data_file}));
  // The same bytes as a plain save would write, slipped in: refused though they are "correct".
  std::ofstream(file, std::ios::binary | std::ios::trunc) << plaintext;
  REQUIRE_THROWS_MATCHES(loom::io::load_checkpoint(saved, other, other_trainer.optimizer()), loom::Error,
                         IsError(ErrorCategory::corrupt_data, {data_file, "plain file in an encrypted checkpoint"}));
  CHECK(weights(other) == before);
  restore();
  loom::io::load_checkpoint(saved, other, other_trainer.optimizer());
  CHECK(weights(other) == weights(model));
}

TEST_CASE("loom-ckpt's consolidate and export of an encrypted checkpoint write encrypted files that load",
          "[io][at_rest]") {
  const fs::path run = fresh_dir("tools");
  KeyScope scope(new_key());
  auto data = task_data();
  loom::nn::GPT model(tiny(), loom::nn::Precision::fp32(), loom::Device::cpu(), 3);
  loom::train::Trainer trainer(model, *data, options());
  trainer.step();
  const std::string saved = loom::io::save_checkpoint(run.string(), model, trainer.optimizer(), trainer.progress());
  const std::string whole = (run / "whole").string();
  loom::io::consolidate_checkpoint(saved, whole);
  for (const char* name : {"state.json", "model.safetensors", "optimizer.safetensors"}) {
    CHECK(loom::crypt::is_encrypted_file((fs::path(whole) / name).string()));
  }
  CHECK(loom::io::verify_checkpoint(whole) == 1);
  const std::string exported = (run / "weights.safetensors").string();
  loom::io::export_weights(whole, exported);
  CHECK(loom::crypt::is_encrypted_file(exported));
  const loom::io::ModelWeights read = loom::io::read_model_weights(exported);
  for (const loom::nn::Parameter* p : model.parameters()) {
    INFO(p->name());
    CHECK(read.tensors.at(p->name()).to_vector<float>() == p->value().to_vector<float>());
  }
}

TEST_CASE("PlaintextReader reads a plain and an encrypted file at offsets alike, and only verified chunks",
          "[io][at_rest]") {
  const fs::path dir = fresh_dir("reader");
  fs::create_directories(dir);
  std::vector<unsigned char> bytes(10000);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>((i * 131 + i / 7) & 0xff);
  const auto key = new_key();
  constexpr std::size_t chunk = 1024;  // ten chunks, the last one short
  const std::string sealed = (dir / "sealed").string(), plain = (dir / "plain").string();
  loom::crypt::write_encrypted_file(sealed, bytes, *key, chunk);
  std::ofstream(plain, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                               static_cast<std::streamsize>(bytes.size()));
  KeyScope scope(key);
  auto expect = [&](loom::io::PlaintextReader& r, std::uint64_t offset, std::size_t n) {
    std::vector<unsigned char> got(n);
    r.read(got.data(), n, offset);
    CHECK(std::equal(got.begin(), got.end(), bytes.begin() + static_cast<std::ptrdiff_t>(offset)));
  };
  for (const std::string& path : {plain, sealed}) {
    INFO(path);
    loom::io::PlaintextReader r(path);
    CHECK(r.encrypted() == (path == sealed));
    CHECK(r.size() == bytes.size());
    expect(r, 0, 100);
    expect(r, 5000, 3000);  // ahead, across chunks
    expect(r, 9990, 10);    // to the end
    expect(r, 10, 50);      // behind
    expect(r, 0, bytes.size());
    std::vector<unsigned char> out(11);
    REQUIRE_THROWS_MATCHES(r.read(out.data(), 11, 9990), loom::Error,
                           IsError(ErrorCategory::corrupt_data, {path, "go past its end at 10000"}));
  }
  // A file cut short after it was opened: a read behind decrypts it again from the same open,
  // and fails by name instead of reading past what is there.
  {
    loom::io::PlaintextReader r(sealed);
    expect(r, 5000, 100);
    fs::resize_file(sealed, loom::crypt::header_bytes + 6 * (chunk + 17));
    std::vector<unsigned char> out(50);
    REQUIRE_THROWS_MATCHES(r.read(out.data(), 50, 10), loom::Error, IsError(ErrorCategory::corrupt_data, {sealed}));
    loom::crypt::write_encrypted_file(sealed, bytes, *key, chunk);
  }
  // A damaged chunk is reached, not trusted: what lies before it reads, it fails by chunk, and
  // the reader stays failed (every later read, ahead or behind, throws the same).
  loom::test::flip_byte(sealed, loom::crypt::header_bytes + 8 * (chunk + 17) + 5);
  loom::io::PlaintextReader r(sealed);
  expect(r, 100, 7000);
  std::vector<unsigned char> out(100, 0xee);
  REQUIRE_THROWS_MATCHES(r.read(out.data(), 100, 8400), loom::Error, IsError(ErrorCategory::corrupt_data, {"chunk 8"}));
  REQUIRE_THROWS_MATCHES(r.read(out.data(), 100, 9000), loom::Error, IsError(ErrorCategory::corrupt_data, {"chunk 8"}));
  REQUIRE_THROWS_MATCHES(r.read(out.data(), 100, 0), loom::Error, IsError(ErrorCategory::corrupt_data, {"chunk 8"}));
  CHECK(std::all_of(out.begin(), out.end(), [](unsigned char c) { return c == 0xee; }));
  // Of the other kind than expected: refused by name.
  REQUIRE_THROWS_MATCHES(loom::io::PlaintextReader(plain, loom::io::Expect::encrypted), loom::Error,
                         IsError(ErrorCategory::corrupt_data, {plain, "plain file"}));
}

TEST_CASE("a run with a key refuses a plain checkpoint unless plain input is allowed, and a data file under another "
          "key stops the resume search", "[io][at_rest][resume]") {
  const fs::path run = fresh_dir("plain_policy");
  auto data = task_data();
  loom::nn::GPT model(tiny(), loom::nn::Precision::fp32(), loom::Device::cpu(), 3);
  loom::train::Trainer trainer(model, *data, options());
  trainer.step();
  const std::string saved = loom::io::save_checkpoint(run.string(), model, trainer.optimizer(), trainer.progress());
  loom::nn::GPT other(tiny(), loom::nn::Precision::fp32(), loom::Device::cpu(), 8);
  loom::train::Trainer other_trainer(other, *data, options());
  const std::vector<std::string> before = weights(other);
  const auto key = new_key();
  {
    KeyScope scope(key);
    REQUIRE_THROWS_MATCHES(loom::io::find_resumable_checkpoint(run.string()), loom::Error,
                           IsError(ErrorCategory::invalid_argument,
                                   {"state.json' is plain", key->id_hex(), "--allow-plain-input"}));
    REQUIRE_THROWS_MATCHES(loom::io::load_checkpoint(saved, other, other_trainer.optimizer()), loom::Error,
                           IsError(ErrorCategory::invalid_argument, {"state.json' is plain", "loom-crypt encrypt"}));
    CHECK(weights(other) == before);
    // Not a regular file where state.json goes (a FIFO would block a reader): refused by name too.
    const fs::path state = fs::path(saved) / "state.json", moved = run / "state.json.saved";
    fs::rename(state, moved);
    REQUIRE(::mkfifo(state.c_str(), 0600) == 0);
    REQUIRE_THROWS_MATCHES(loom::io::find_resumable_checkpoint(run.string()), loom::Error,
                           IsError(ErrorCategory::invalid_argument, {"state.json' is not a regular file"}));
    fs::remove(state);
    fs::rename(moved, state);
    loom::io::set_plain_input_allowed(true);
    CHECK(loom::io::find_resumable_checkpoint(run.string()).chosen == saved);
    loom::io::load_checkpoint(saved, other, other_trainer.optimizer());
    CHECK(weights(other) == weights(model));
    loom::io::set_plain_input_allowed(false);
  }
  // An encrypted checkpoint whose state.json is under this run's key but a data file under
  // another: a key problem that stops the search (naming both ids), not damage to pass over.
  const fs::path sealed_run = fresh_dir("other_key_file");
  std::string sealed;
  {
    KeyScope scope(key);
    sealed = loom::io::save_checkpoint(sealed_run.string(), model, trainer.optimizer(), trainer.progress());
  }
  const auto stranger = new_key();
  const std::string rank_file = (fs::path(sealed) / "rank_00000.safetensors").string();
  {
    KeyScope scope(key);
    const std::string plaintext = loom::io::read_at_rest(rank_file);
    loom::crypt::write_encrypted_file(rank_file, {reinterpret_cast<const unsigned char*>(plaintext.data()),
                                                  plaintext.size()}, *stranger);
    REQUIRE_THROWS_MATCHES(loom::io::find_resumable_checkpoint(sealed_run.string()), loom::Error,
                           IsError(ErrorCategory::invalid_argument,
                                   {"rank_00000.safetensors", stranger->id_hex(), key->id_hex()}));
  }
}

TEST_CASE("the ranks of a job stop their resume search together on a key problem, each naming the key once",
          "[io][at_rest][resume]") {
  const fs::path run = fresh_dir("ranks_key");
  const auto key = new_key();
  {
    KeyScope scope(key);
    loom::comm::run_in_process(2, [&](loom::comm::Communicator& comm) {
      loom::nn::GPT model(tiny(), loom::nn::Precision::fp32(), loom::Device::cpu(), 3,
                          loom::shard::space_layout(1, &comm));
      loom::test::GlobalBatchSlice data(4, 2 * comm.rank(), 2);
      loom::train::Trainer trainer(model, data, loom::test::tiny_trainer_options(1), &comm);
      trainer.step();
      trainer.save(run.string());
    });
  }
  // No key (every rank: the key is the process's), then a data file of rank 1 under another key.
  const auto search_on_ranks = [&] {
    std::vector<std::string> messages(3);
    loom::comm::run_in_process(3, [&](loom::comm::Communicator& comm) {
      messages[static_cast<std::size_t>(comm.rank())] =
          loom::test::error_message([&] { loom::io::find_resumable_checkpoint(run.string(), comm); });
    });
    return messages;
  };
  for (const std::string& message : search_on_ranks()) {
    CHECK_THAT(message, Catch::StartsWith("loom invalid argument error") && Catch::Contains(key->id_hex()) &&
                            !Catch::Contains("error: loom"));
  }
  const auto stranger = new_key();
  KeyScope scope(key);
  const std::string file = (run / "step_00000001" / "rank_00001.safetensors").string();
  const std::string plaintext = loom::io::read_at_rest(file);
  loom::crypt::write_encrypted_file(file, {reinterpret_cast<const unsigned char*>(plaintext.data()), plaintext.size()},
                                    *stranger);
  for (const std::string& message : search_on_ranks()) {
    CHECK_THAT(message, Catch::StartsWith("loom invalid argument error") && Catch::Contains("rank_00001.safetensors") &&
                            Catch::Contains(stranger->id_hex()) && !Catch::Contains("error: loom"));
  }
}

TEST_CASE("an output file refuses a FIFO or a link at its path, plain or encrypted, and leaves it as it was",
          "[io][at_rest]") {
  const fs::path dir = fresh_dir("fifo");
  fs::create_directories(dir);
  const fs::path fifo = dir / "pipe.safetensors", link = dir / "link.safetensors", victim = dir / "victim";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  std::ofstream(victim) << "kept";
  fs::create_symlink(victim, link);
  for (const bool sealed : {false, true}) {
    INFO((sealed ? "encrypted" : "plain"));
    KeyScope scope(sealed ? new_key() : nullptr);
    // (Opening a FIFO to write would block until a reader came: refused at once instead.)
    REQUIRE_THROWS_MATCHES(loom::io::OutputFile(fifo.string()), loom::Error,
                           IsError(ErrorCategory::io, {fifo.string(), "not a regular file"}));
    CHECK(fs::is_fifo(fifo));
    REQUIRE_THROWS_MATCHES(loom::io::OutputFile(link.string()), loom::Error,
                           IsError(ErrorCategory::io, {link.string(), "cannot create"}));
    CHECK(file_bytes(victim) == "kept");
  }
}
