// llm.c's model file: a file crafted byte by byte here (each element's value its index in the
// file, so every tensor's place is checked against the layout llm.c's gpt2_build_from_checkpoint
// reads), written back byte for byte, and every kind of damage named.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "loom/convert/llmc_gpt2.hpp"
#include "loom/core/error.hpp"
#include "loom/core/numeric.hpp"
#include "loom/io/files.hpp"

using loom::Tensor;
using loom::convert::parse_llmc_gpt2;

namespace {

// header: maxT 4, V 5, L 2, NH 2, C 4, Vp 8; then float(i) for element i of the tensor data.
std::string crafted(std::int32_t version = 3, std::int64_t extra_elements = 0) {
  const std::int32_t t = 4, v = 5, l = 2, nh = 2, c = 4, vp = 8;
  std::vector<std::int32_t> header(256, 0);
  header[0] = 20240326;
  header[1] = version;
  header[2] = t;
  header[3] = v;
  header[4] = l;
  header[5] = nh;
  header[6] = c;
  header[7] = vp;
  const std::int64_t n = vp * c + t * c + l * (c + c + 3 * c * c + 3 * c + c * c + c + c + c + 4 * c * c + 4 * c +
                                               4 * c * c + c) + c + c + extra_elements;
  std::string bytes(reinterpret_cast<const char*>(header.data()), 1024);
  for (std::int64_t i = 0; i < n; ++i) {
    const float f = static_cast<float>(i);
    if (version == 5) {
      std::uint32_t u = 0;
      std::memcpy(&u, &f, 4);
      const auto b = static_cast<std::uint16_t>(u >> 16);  // exact: small integers
      bytes.append(reinterpret_cast<const char*>(&b), 2);
    } else {
      bytes.append(reinterpret_cast<const char*>(&f), 4);
    }
  }
  return bytes;
}

void set_header(std::string& bytes, int field, std::int32_t value) {
  std::memcpy(bytes.data() + 4 * field, &value, 4);
}

}  // namespace

TEST_CASE("An llm.c model file's tensors land in loom's names and layout", "[convert]") {
  const auto w = parse_llmc_gpt2(crafted(), "crafted.bin");
  CHECK(w.config.context == 4);
  CHECK(w.config.vocab_size == 5);
  CHECK(w.config.layers == 2);
  CHECK(w.config.heads == 2);
  CHECK(w.config.channels == 4);
  // wte: the file's 8 rows [0, 32) -> loom's 64 rows (5 padded to 64): the 5 real rows, then
  // zeros (the file's padding rows are not kept).
  const Tensor& wte = w.tensors.at("wte");
  REQUIRE(wte.shape() == loom::Shape{64, 4});
  CHECK(wte.at<float>({1, 2}) == 6.0f);
  CHECK(wte.at<float>({4, 3}) == 19.0f);
  CHECK(wte.at<float>({5, 0}) == 0.0f);
  CHECK(wte.at<float>({7, 3}) == 0.0f);
  CHECK(w.tensors.at("wpe").at<float>({0, 0}) == 32.0f);  // after wte's 32 elements
  // ln1w [L, C] at 48, ln1b at 56, qkvw [L, 3C, C] at 64: layer 1's starts at 64 + 48.
  CHECK(w.tensors.at("h0.ln1.weight").at<float>({0}) == 48.0f);
  CHECK(w.tensors.at("h1.ln1.weight").at<float>({3}) == 55.0f);
  CHECK(w.tensors.at("h1.ln1.bias").at<float>({0}) == 60.0f);
  CHECK(w.tensors.at("h1.attn.qkv.weight").at<float>({2, 1}) == 64.0f + 48 + 2 * 4 + 1);
  // The last two tensors, lnfw and lnfb, end the file.
  const std::int64_t total = 32 + 16 + 2 * (4 + 4 + 48 + 12 + 16 + 4 + 4 + 4 + 64 + 16 + 64 + 4) + 8;
  CHECK(w.tensors.at("ln_f.bias").at<float>({3}) == static_cast<float>(total - 1));
  CHECK(w.tensors.at("ln_f.weight").at<float>({0}) == static_cast<float>(total - 8));
  const auto bf16 = parse_llmc_gpt2(crafted(5), "crafted_bf16.bin");
  CHECK(bf16.tensors.at("h1.attn.qkv.weight").dtype() == loom::DType::bf16);
  CHECK(loom::bf16_bits_to_float(bf16.tensors.at("h1.attn.qkv.weight").to_vector<loom::bfloat16>()[9].bits) == 64.0f + 48 + 9);
}

TEST_CASE("An llm.c model file is written back byte for byte", "[convert]") {
  const std::string dir = (std::filesystem::temp_directory_path() / "loom_test_llmc").string();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  for (const std::int32_t version : {3, 5}) {
    // The file's vocabulary is padded to 128 as llm.c pads it: Vp 128, rows past the 5 real ones zero.
    std::string original = crafted(version);
    const auto w = parse_llmc_gpt2(original, "crafted.bin");
    loom::convert::write_llmc_gpt2(w, dir + "/out.bin");
    const std::string written = loom::io::read_file(dir + "/out.bin");
    const auto again = parse_llmc_gpt2(written, "out.bin");
    INFO("version " << version);
    std::int32_t vp = 0;
    std::memcpy(&vp, written.data() + 28, 4);
    CHECK(vp == 128);
    for (const auto& [name, tensor] : w.tensors) {
      INFO(name);
      const Tensor& other = again.tensors.at(name);
      CHECK(std::memcmp(tensor.raw_data(), other.raw_data(), tensor.nbytes()) == 0);
    }
    loom::convert::write_llmc_gpt2(again, dir + "/again.bin");
    CHECK(loom::io::read_file(dir + "/again.bin") == written);
  }
  CHECK_FALSE(std::filesystem::exists(dir + "/out.bin.tmp"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("A damaged llm.c model file is named", "[convert]") {
  auto refused = [](const std::string& bytes, const std::string& expected) {
    try {
      parse_llmc_gpt2(bytes, "m.bin");
      FAIL("accepted, expected: " << expected);
    } catch (const loom::Error& error) {
      CHECK(error.category() == loom::ErrorCategory::corrupt_data);
      CHECK_THAT(error.what(), Catch::Contains(expected));
    }
  };
  refused(crafted().substr(0, 100), "fewer than its 1024-byte header");
  std::string bytes = crafted();
  set_header(bytes, 0, 20240520);
  refused(bytes, "is not an llm.c model file (magic 20240520");
  refused(crafted(1), "has version 1; loom reads 3 (fp32) and 5 (bf16)");
  bytes = crafted();
  set_header(bytes, 4, 0);
  refused(bytes, "num_layers is 0, not positive");
  bytes = crafted();
  set_header(bytes, 5, 3);
  refused(bytes, "channels 4 is not a multiple of num_heads 3");
  bytes = crafted();
  set_header(bytes, 7, 4);
  refused(bytes, "padded_vocab_size 4 is below vocab_size 5");
  refused(crafted().substr(0, crafted().size() - 4), "(truncated)");
  refused(crafted(3, 1), "(bytes after the last tensor)");
  bytes = crafted();
  for (const int field : {4, 6}) set_header(bytes, field, 2000000000);
  set_header(bytes, 5, 1);
  refused(bytes, "overflow");
}
