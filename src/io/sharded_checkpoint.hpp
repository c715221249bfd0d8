// loom-checkpoint-2, the sharded checkpoint format (io/checkpoint.hpp): each rank writes the pieces
// it owns into its own file (io/piece_file.hpp) and reads back only the stored pieces that overlap
// what it holds (io/pieces.hpp), whatever the ranks and ZeRO stage on either side.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "loom/comm/communicator.hpp"
#include "loom/io/checkpoint.hpp"
#include "loom/io/files.hpp"
#include "loom/io/piece_file.hpp"
#include "loom/io/pieces.hpp"
#include "src/io/checkpoint_manifest.hpp"

namespace loom::io::detail {

// What this rank's model and optimizer hold, piece by piece: parameter values (named like the
// parameter) and optimizer state ("<parameter>.<kind>", f32). `target` is a flat view of where the
// elements live (any device). `replicas` ranks hold the same piece, this one as number `replica`
// of them: every rank of the data group holds values under DDP and ZeRO-1/2 and an unsharded
// optimizer's state (ZeRO-3's value slices and a sharded optimizer's segments are one data rank's
// alone), and every rank of the tensor group holds a parameter that is not split (a LayerNorm's).
// rank/world place this rank in the data x tensor mesh with the model's tensor_ranks().
struct HeldPiece {
  Piece piece;
  Tensor target;
  int replicas = 1;
  int replica = 0;
};
std::vector<HeldPiece> held_pieces(const model::Model& model, const optim::Optimizer& optimizer, int rank, int world);

// The pieces this rank writes: its own pieces, and 1/replicas of each replicated one (elements
// [n k / replicas, n (k + 1) / replicas) for replica k), so every element is written exactly once.
std::vector<HeldPiece> owned_pieces(const std::vector<HeldPiece>& held);

// What one rank's part of a sharded save is, taken at a step boundary: the pieces it writes and
// the state.json rank 0 commits. The pieces' data are views of the live tensors (a synchronous
// save) or host copies of them (a snapshot, io/checkpoint_writer.hpp).
struct ShardedSave {
  std::int64_t step = 0;
  int rank = 0, world = 1;
  std::vector<StoredPiece> pieces;
  nlohmann::json manifest;  // state.json without "files"
  std::uint64_t data_bytes() const;
};
ShardedSave sharded_save(const model::Model& model, const optim::Optimizer& optimizer, const TrainingProgress& progress,
                         int rank, int world);
// The same as rank comm->rank() of comm->size() (null: one process), agreed: listing the pieces
// checks this rank's place, and a rank that fails there fails every rank before any collective
// that would wait for it.
ShardedSave agreed_sharded_save(const model::Model& model, const optim::Optimizer& optimizer,
                                const TrainingProgress& progress, comm::Communicator* comm);

// Writes the save: rank 0 prepares <run>/.step_<N>.tmp/, every rank writes and fsyncs its file
// there, the files' sizes and CRC-32s are summed over the ranks, and rank 0 commits (state.json,
// rename, `latest`). Collective over comm (null: one process), whose timeout bounds the wait for
// the slowest rank's write; a failure anywhere fails it on every rank and leaves `latest` as it
// was. Returns the checkpoint's directory.
std::string write_and_commit(const std::string& run_dir, const ShardedSave& save, comm::Communicator* comm,
                             double max_bytes_per_second = 0);

// A sharded checkpoint's piece files, headers read, sizes checked against the manifest.
std::vector<std::unique_ptr<PieceFile>> open_piece_files(const std::string& dir, const CheckpointManifest& manifest);
// Where each stored tensor's pieces are (file, index in its table), checked to cover it exactly once.
struct StoredRef {
  std::size_t file = 0, index = 0;
};
std::map<std::string, std::vector<StoredRef>> stored_tensors(const std::vector<std::unique_ptr<PieceFile>>& files);
// A whole stored tensor assembled on the host from its pieces (each verified).
Tensor assemble_tensor(const std::vector<std::unique_ptr<PieceFile>>& files, const std::vector<StoredRef>& pieces);

// Checks a sharded checkpoint's files against its manifest (every file's size; the CRC-32 of the
// whole files r with r % parts == part, which reads them) and their piece tables against each
// other (every stored tensor covered exactly once). corrupt_data Errors name the file and the
// piece.
void verify_sharded(const std::string& dir, const CheckpointManifest& manifest, int part = 0, int parts = 1);

// Loads this rank's part of every value and state tensor: the stored pieces that overlap it are
// read (each verified by its CRC-32) and staged on the host, and only when every one has been read
// is anything copied into the model and optimizer. The tensors must be exactly those the model and
// optimizer have (names, global shapes, dtypes), or an invalid_argument Error names the first that
// differs.
void load_sharded(const std::string& dir, const CheckpointManifest& manifest, model::Model& model,
                  optim::Optimizer& optimizer);

}  // namespace loom::io::detail
