// io::write_piece_file / PieceFile: a rank's pieces round-trip bit for bit with their table; the
// file is plain safetensors (the full reader takes it); a flipped byte is named by entry and
// tensor when that piece is read, and only then; truncation, a table that lists an entry the file
// lacks, an entry missing from the table, and a size mismatch are named when the file is opened.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "loom/core/error.hpp"
#include "loom/io/piece_file.hpp"
#include "support/file_damage.hpp"

using loom::DType;
using loom::Shape;
using loom::Tensor;
using loom::io::Piece;
using loom::io::StoredPiece;
namespace fs = std::filesystem;

using loom::test::flip_byte;

namespace {

std::string scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / "loom_test_piece_file";
  fs::create_directories(dir);
  return (dir / name).string();
}

std::vector<StoredPiece> sample() {
  std::vector<float> left(12), right(5);
  for (std::size_t i = 0; i < left.size(); ++i) left[i] = 0.5f * static_cast<float>(i) - 3.0f;
  for (std::size_t i = 0; i < right.size(); ++i) right[i] = 100.0f + static_cast<float>(i);
  const Tensor bias = Tensor::empty({4}, DType::bf16);
  auto* bits = static_cast<std::uint16_t*>(bias.raw_data());
  for (std::int64_t i = 0; i < 4; ++i) bits[i] = static_cast<std::uint16_t>(0x3f80 + i);
  return {
      {Piece{"w", Shape{6, 4}, {0, 0}, Shape{6, 2}, 0, 12}, Tensor::from_vector(left, {12})},  // a column block
      {Piece{"w", Shape{6, 4}, {0, 2}, Shape{6, 2}, 3, 8}, Tensor::from_vector(right, {5})},   // part of the other
      {Piece{"b", Shape{4}, {0}, Shape{4}, 0, 4}, bias},
  };
}

}  // namespace

TEST_CASE("a piece file round-trips its pieces and table, and is plain safetensors", "[io][pieces]") {
  const std::string path = scratch("roundtrip.safetensors");
  const std::vector<StoredPiece> pieces = sample();
  const loom::io::FileDigest digest = loom::io::write_piece_file(path, pieces, {{"rank", "1"}});
  CHECK(digest.bytes == fs::file_size(path));
  CHECK(digest.crc32 == loom::io::digest_file(path).crc32);  // combined from the pieces' CRC-32s
  loom::io::PieceFile file(path);
  REQUIRE(file.pieces().size() == 3);
  CHECK(file.metadata() == std::map<std::string, std::string>{{"rank", "1"}});
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const loom::io::PieceEntry& e = file.pieces()[i];
    CHECK(e.piece.tensor == pieces[i].piece.tensor);
    CHECK(e.piece.global == pieces[i].piece.global);
    CHECK(e.piece.offset == pieces[i].piece.offset);
    CHECK(e.piece.box == pieces[i].piece.box);
    CHECK(e.piece.begin == pieces[i].piece.begin);
    CHECK(e.piece.end == pieces[i].piece.end);
    CHECK(e.dtype == pieces[i].data.dtype());
    const Tensor back = file.read(i);
    REQUIRE(back.nbytes() == pieces[i].data.nbytes());
    CHECK(std::memcmp(back.raw_data(), pieces[i].data.raw_data(), back.nbytes()) == 0);
  }
  CHECK(file.pieces()[1].entry == "w:1");
  const loom::io::SafetensorsContents whole = loom::io::read_safetensors(path);  // the full reader takes it
  CHECK(whole.tensors.size() == 3);
  CHECK(whole.tensors.at("b:0").dtype() == DType::bf16);
}

TEST_CASE("a damaged piece is named when it is read, and only that piece", "[io][pieces]") {
  const std::string path = scratch("flipped.safetensors");
  loom::io::write_piece_file(path, sample());
  const loom::io::SafetensorsIndex index = loom::io::read_safetensors_index(path);
  const loom::io::SafetensorsEntry& w1 = index.entries.at("w:1");
  flip_byte(path, index.data_start + w1.begin + 5);
  loom::io::PieceFile file(path);
  CHECK_NOTHROW(file.read(0));
  CHECK_NOTHROW(file.read(2));
  CHECK_THROWS_WITH(file.read(1), Catch::Contains("entry 'w:1' (the piece [3, 8) of 'w') has CRC-32") &&
                                      Catch::Contains("the file is damaged"));
}

TEST_CASE("a truncated piece file or a table that does not match its entries is named on opening", "[io][pieces]") {
  const std::string path = scratch("truncated.safetensors");
  loom::io::write_piece_file(path, sample());
  fs::resize_file(path, fs::file_size(path) - 3);
  CHECK_THROWS_WITH(loom::io::PieceFile(path), Catch::Contains("(truncated)"));

  const std::string table_path = scratch("table.safetensors");
  const Tensor four = Tensor::zeros({4}, DType::f32);
  const std::string row = R"({"entry":"b:0","tensor":"b","global":[4],"offset":[0],"box":[4],"begin":0,"end":4,"crc32":0})";
  loom::io::write_safetensors(table_path, {{"b:0", four}}, {{"loom.pieces", "[" + row + "," +
                                                              R"({"entry":"c:0","tensor":"c","global":[4],"offset":[0],"box":[4],"begin":0,"end":4,"crc32":0})" + "]"}});
  CHECK_THROWS_WITH(loom::io::PieceFile(table_path), Catch::Contains("lists entry 'c:0', which the file does not hold"));
  loom::io::write_safetensors(table_path, {{"b:0", four}, {"x:0", four}}, {{"loom.pieces", "[" + row + "]"}});
  CHECK_THROWS_WITH(loom::io::PieceFile(table_path), Catch::Contains("entry 'x:0' is not in the piece table"));
  loom::io::write_safetensors(table_path, {{"b:0", Tensor::zeros({3}, DType::f32)}}, {{"loom.pieces", "[" + row + "]"}});
  CHECK_THROWS_WITH(loom::io::PieceFile(table_path), Catch::Contains("entry 'b:0' is (3) but its piece of 'b' has 4 elements"));
  loom::io::write_safetensors(table_path, {{"b:0", four}});
  CHECK_THROWS_WITH(loom::io::PieceFile(table_path), Catch::Contains("no piece table"));
  // Numbers that are not integers (a float would convert out of range) are named, not converted.
  std::string floating = row;
  floating.replace(floating.find("\"end\":4"), 7, "\"end\":1e300");
  loom::io::write_safetensors(table_path, {{"b:0", four}}, {{"loom.pieces", "[" + floating + "]"}});
  CHECK_THROWS_WITH(loom::io::PieceFile(table_path), Catch::Contains("has end = 1e+300, not an integer"));
  std::string negative = row;
  negative.replace(negative.find("\"crc32\":0"), 9, "\"crc32\":-1.5");
  loom::io::write_safetensors(table_path, {{"b:0", four}}, {{"loom.pieces", "[" + negative + "]"}});
  CHECK_THROWS_WITH(loom::io::PieceFile(table_path), Catch::Contains("has crc32 = -1.5, not a 32-bit unsigned integer"));
  CHECK_THROWS_WITH(loom::io::write_piece_file(table_path, {{StoredPiece{Piece{"b", Shape{4}, {0}, Shape{4}, 0, 4}, Tensor::zeros({3}, DType::f32)}}}),
                    Catch::Contains("has 4 elements but its data is"));
}
