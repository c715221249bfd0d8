// libFuzzer target: a sharded checkpoint's rank file (safetensors with a piece table). The bytes
// go to a scratch file (PieceFile reads where pieces lie, through io::PlaintextReader); opening
// it, reading every piece, and the piece arithmetic over its table either work or are a
// loom::Error; anything else (another exception, a crash, a leak, a hang) is a finding.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "loom/core/error.hpp"
#include "loom/io/piece_file.hpp"
#include "loom/io/pieces.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string path = "/tmp/loom_fuzz_piece_file_" + std::to_string(::getpid()) + ".safetensors";
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  try {
    loom::io::PieceFile file(path);
    std::map<std::string, std::vector<loom::io::Piece>> tensors;
    for (std::size_t i = 0; i < file.pieces().size(); ++i) {
      try {
        file.read(i);
      } catch (const loom::Error&) {
      }
      (void)loom::io::global_runs(file.pieces()[i].piece);
      tensors[file.pieces()[i].piece.tensor].push_back(file.pieces()[i].piece);
    }
    for (const auto& [name, pieces] : tensors) {
      try {
        loom::io::check_cover(pieces);
      } catch (const loom::Error&) {
      }
    }
  } catch (const loom::Error&) {
  }
  return 0;
}
