// One rank's file of a sharded checkpoint (loom-checkpoint-2): the pieces (io/pieces.hpp) of
// parameters and optimizer state that the rank owns, as one safetensors file that any safetensors
// reader opens. Entry "<tensor>:<k>" holds the k-th piece of <tensor> stored in this file, flat
// ([numel]); the metadata key "loom.pieces" holds the piece table as JSON, one object per entry:
//   {"entry", "tensor", "global", "offset", "box", "begin", "end", "crc32"}
// where crc32 covers the entry's bytes, so each piece read on its own is verified on its own.
// A reader takes the header alone (PieceFile), then reads one piece at a time where it lies.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "loom/core/tensor.hpp"
#include "loom/io/at_rest.hpp"
#include "loom/io/files.hpp"
#include "loom/io/pieces.hpp"
#include "loom/io/safetensors.hpp"

namespace loom::io {

struct StoredPiece {
  Piece piece;
  Tensor data;  // the piece's elements in order: numel == piece.numel(), any dtype and device
};

// Writes (truncating) and fsyncs path; returns its size and CRC-32 (for state.json). Pieces must
// be valid and their data the right size: an invalid_argument Error names the piece otherwise.
// max_bytes_per_second: as for write_safetensors (0: as fast as the disk takes it).
FileDigest write_piece_file(const std::string& path, std::span<const StoredPiece> pieces,
                            const std::map<std::string, std::string>& metadata = {}, double max_bytes_per_second = 0);

struct PieceEntry {
  std::string entry;  // the safetensors name
  Piece piece;
  DType dtype = DType::f32;
  std::uint32_t crc32 = 0;
};

class PieceFile {
 public:
  // Reads and checks the header and the piece table (every entry present, flat, of its piece's
  // size, and every piece valid); a corrupt_data Error names the file and the entry otherwise.
  // An encrypted file (io/at_rest.hpp) is decrypted here only as far as its header; `expect`
  // says which kind it must be.
  explicit PieceFile(std::string path, Expect expect = Expect::any);

  const std::string& path() const noexcept { return path_; }
  const std::vector<PieceEntry>& pieces() const noexcept { return pieces_; }
  // The metadata other than the piece table.
  const std::map<std::string, std::string>& metadata() const noexcept { return metadata_; }
  // Piece i's elements, read where they lie and checked against its CRC-32: a flipped byte is a
  // corrupt_data Error naming the file, the entry and the tensor. An encrypted file is decrypted
  // on the way, through one chunk of memory when pieces are read in their order (0, 1, ...): then
  // only as far as the last piece read (PlaintextReader). Not thread-safe.
  Tensor read(std::size_t i);

 private:
  std::string path_;
  std::unique_ptr<PlaintextReader> file_;
  SafetensorsIndex index_;
  std::vector<PieceEntry> pieces_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace loom::io
