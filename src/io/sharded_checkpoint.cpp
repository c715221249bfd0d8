#include "src/io/sharded_checkpoint.hpp"

#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <unordered_map>

#include "loom/comm/agreement.hpp"
#include "loom/core/error.hpp"
#include "loom/core/tensor_ops.hpp"
#include "loom/io/piece_file.hpp"
#include "loom/optim/state_io.hpp"
#include "src/io/checkpoint_commit.hpp"

namespace loom::io::detail {

namespace fs = std::filesystem;

namespace {

// Where this rank sits among the ranks holding copies of a piece (see HeldPiece).
struct MeshPlace {
  int data_rank = 0, data_ranks = 1, tensor_rank = 0, tensor_ranks = 1;
  // The copies of a piece held by every rank of the data group (when over_data) and of the tensor
  // group (when over_tensor), and which of them this rank's is.
  std::pair<int, int> replication(bool over_data, bool over_tensor) const {
    const int tensor = over_tensor ? tensor_ranks : 1, data = over_data ? data_ranks : 1;
    return {data * tensor, (over_data ? data_rank : 0) * tensor + (over_tensor ? tensor_rank : 0)};
  }
};

MeshPlace mesh_place(const model::Model& model, int rank, int world) {
  const int tensor = model.tensor_ranks();
  require(tensor >= 1 && world % tensor == 0, "checkpoint: the model is split over a tensor group of ", tensor,
          " ranks, which does not divide the ", world, " ranks saving it (pass the world communicator)");
  require(rank % tensor == model.tensor_rank(), "checkpoint: rank ", rank, " of the ", world, " saving ranks holds "
          "tensor rank ", model.tensor_rank(), " of its model, not ", rank % tensor, " (save over the world "
          "communicator, whose ranks a data x tensor mesh orders: world rank = data rank x ", tensor, " + tensor rank)");
  if (tensor == 1) {
    for (const model::Parameter* p : model.parameter_space().parameters()) {
      require(p->partition().replicated, "checkpoint: parameter '", p->name(), "' is one rank's block of a split "
              "tensor, but the model reports no tensor group (Model::tensor_ranks() is 1): override it");
    }
  }
  return {rank / tensor, world / tensor, rank % tensor, tensor};
}

// The pieces of a parameter's local elements [begin, end), each with its part of `data` (those
// elements, flat).
void add_pieces(std::vector<HeldPiece>& held, const std::string& name, const model::Parameter& p, std::int64_t begin,
                std::int64_t end, const Tensor& data, std::pair<int, int> replication) {
  std::int64_t at = 0;
  for (Piece& piece : pieces_of(name, p.partition(), p.shape(), begin, end)) {
    const std::int64_t n = piece.numel();
    held.push_back({std::move(piece), data.slice(at, at + n), replication.first, replication.second});
    at += n;
  }
}

}  // namespace

std::vector<HeldPiece> held_pieces(const model::Model& model, const optim::Optimizer& optimizer, int rank,
                                   int world) {
  const MeshPlace place = mesh_place(model, rank, world);
  const model::ParameterSpace& space = model.parameter_space();
  std::vector<HeldPiece> held;
  for (const model::Slot& slot : space.slots()) {
    const model::Parameter& p = *slot.parameter;
    const bool over_tensor = p.partition().replicated;
    if (slot.numel == 0) {  // no slice or segment holds it: one empty piece each (rank 0 writes them)
      const std::pair<int, int> everyone{world, rank};
      add_pieces(held, p.name(), p, 0, 0, Tensor::empty({0}, p.dtype()), everyone);
      for (const std::string& kind : optimizer.state_kinds()) {
        add_pieces(held, p.name() + "." + kind, p, 0, 0, Tensor::empty({0}, DType::f32), everyone);
      }
      continue;
    }
    if (space.value_mode() == model::ValueMode::full) {
      add_pieces(held, p.name(), p, 0, slot.numel, p.value().flatten(), place.replication(true, over_tensor));
      continue;
    }
    // ZeRO-3: this rank's slice of the slot's unit, where it overlaps the slot.
    const model::Unit& unit = space.units()[slot.unit];
    const std::int64_t size = unit.elements / space.ranks(), first = unit.begin + space.value_rank() * size;
    const std::int64_t begin = std::max(first, slot.offset), end = std::min(first + size, slot.offset + slot.numel);
    if (begin >= end) continue;
    add_pieces(held, p.name(), p, begin - slot.offset, end - slot.offset, space.stored_values(begin, end),
               place.replication(false, over_tensor));
  }
  for (const std::string& kind : optimizer.state_kinds()) {
    const Tensor& state = optimizer.state(kind);
    for (const optim::Optimizer::Segment& s : optimizer.segments()) {
      const model::Slot& slot = space.slots()[s.slot];
      const model::Parameter& p = *slot.parameter;
      add_pieces(held, p.name() + "." + kind, p, s.begin - slot.offset, s.end - slot.offset,
                 state.slice(s.local, s.local + (s.end - s.begin)),
                 place.replication(!optimizer.sharded(), p.partition().replicated));
    }
  }
  return held;
}

std::vector<HeldPiece> owned_pieces(const std::vector<HeldPiece>& held) {
  std::vector<HeldPiece> owned;
  for (const HeldPiece& h : held) {
    if (h.replicas == 1) {
      owned.push_back(h);
      continue;
    }
    const std::int64_t n = h.piece.numel(), from = n * h.replica / h.replicas, to = n * (h.replica + 1) / h.replicas;
    if (from == to && (n > 0 || h.replica != 0)) continue;  // an empty tensor is still written, once
    HeldPiece part = h;
    part.piece.begin = h.piece.begin + from;
    part.piece.end = h.piece.begin + to;
    part.target = h.target.slice(from, to);
    owned.push_back(std::move(part));
  }
  return owned;
}

std::uint64_t ShardedSave::data_bytes() const {
  std::uint64_t bytes = 0;
  for (const StoredPiece& p : pieces) bytes += static_cast<std::uint64_t>(p.data.nbytes());
  return bytes;
}

ShardedSave sharded_save(const model::Model& model, const optim::Optimizer& optimizer, const TrainingProgress& progress,
                         int rank, int world) {
  ShardedSave save{progress.step, rank, world, {}, manifest_json(model, optimizer, progress)};
  for (const HeldPiece& h : owned_pieces(held_pieces(model, optimizer, rank, world))) {
    save.pieces.push_back({h.piece, h.target});
  }
  const model::ParameterSpace& space = model.parameter_space();
  nlohmann::json& manifest = save.manifest;
  manifest["format"] = sharded_checkpoint_format;
  manifest["world"] = world;
  manifest["layout"] = {{"values", space.value_mode() == model::ValueMode::full ? "full" : "sharded"},
                        {"optimizer", optimizer.sharded() ? "sharded" : "full"},
                        {"space_ranks", space.ranks()}};
  nlohmann::json model_tensors = nlohmann::json::array(), optimizer_tensors = nlohmann::json::array();
  for (const model::Slot& slot : space.slots()) model_tensors.push_back(slot.parameter->name());
  for (const auto& [name, shape] : optim::state_layout(optimizer)) optimizer_tensors.push_back(name);
  manifest["tensors"] = {{"model", model_tensors}, {"optimizer", optimizer_tensors}};
  return save;
}

ShardedSave agreed_sharded_save(const model::Model& model, const optim::Optimizer& optimizer,
                                const TrainingProgress& progress, comm::Communicator* comm) {
  if (comm == nullptr) return sharded_save(model, optimizer, progress, 0, 1);
  ShardedSave save;
  std::exception_ptr failure;
  try {
    save = sharded_save(model, optimizer, progress, comm->rank(), comm->size());
  } catch (...) {
    failure = std::current_exception();
  }
  comm::throw_if_any_failed(*comm, failure, "listing a checkpoint's pieces");
  return save;
}

std::string write_and_commit(const std::string& run_dir, const ShardedSave& save, comm::Communicator* comm,
                             double max_bytes_per_second) {
  require(comm == nullptr ? save.world == 1 && save.rank == 0 : save.world == comm->size() && save.rank == comm->rank(),
          "writing a checkpoint: the save was taken as rank ", save.rank, " of ", save.world, " but the communicator is ",
          comm == nullptr ? "none" : "of another layout");
  auto agree = [&](std::exception_ptr failure, const char* what) {
    if (comm != nullptr) {
      comm::throw_if_any_failed(*comm, failure, what);
    } else if (failure) {
      std::rethrow_exception(failure);
    }
  };
  std::exception_ptr failure;
  const fs::path temporary = temporary_dir(run_dir, save.step);
  if (save.rank == 0) {
    try {
      prepare_temporary(run_dir, save.step);
    } catch (...) {
      failure = std::current_exception();
    }
  }
  agree(failure, "preparing a checkpoint folder");
  std::vector<std::int64_t> digests(static_cast<std::size_t>(2 * save.world), 0);
  try {
    const FileDigest d = write_piece_file((temporary / rank_file_name(save.rank)).string(), save.pieces,
                                          {{"rank", std::to_string(save.rank)}, {"world", std::to_string(save.world)}},
                                          max_bytes_per_second);
    digests[static_cast<std::size_t>(2 * save.rank)] = static_cast<std::int64_t>(d.bytes);
    digests[static_cast<std::size_t>(2 * save.rank + 1)] = d.crc32;
  } catch (...) {
    failure = std::current_exception();
  }
  agree(failure, "writing a checkpoint");
  if (comm != nullptr) digests = comm::all_reduce_values(*comm, digests, comm::ReduceOp::sum);
  std::string where = (fs::path(run_dir) / step_name(save.step)).string();
  if (save.rank == 0) {
    try {
      nlohmann::json files = nlohmann::json::object();
      for (int r = 0; r < save.world; ++r) {
        files[rank_file_name(r)] = {{"bytes", digests[static_cast<std::size_t>(2 * r)]},
                                    {"crc32", digests[static_cast<std::size_t>(2 * r + 1)]}};
      }
      nlohmann::json manifest = save.manifest;
      manifest["files"] = files;
      where = commit(run_dir, temporary, save.step, manifest);
    } catch (...) {
      failure = std::current_exception();
    }
  }
  agree(failure, "committing a checkpoint");
  return where;
}

std::vector<std::unique_ptr<PieceFile>> open_piece_files(const std::string& dir, const CheckpointManifest& manifest) {
  std::vector<std::unique_ptr<PieceFile>> files;
  for (int r = 0; r < manifest.world; ++r) {
    const std::string name = rank_file_name(r), path = (fs::path(dir) / name).string();
    if (!fs::exists(path)) fail(ErrorCategory::corrupt_data, "checkpoint file '", path, "' is missing");
    const std::uint64_t bytes = plaintext_size(path, manifest.data_files());
    const CheckpointManifest::File& expected = manifest.files.at(name);
    if (bytes != expected.bytes) {
      fail(ErrorCategory::corrupt_data, "checkpoint file '", path, "' has ", bytes, " bytes, not the ", expected.bytes,
           " its state.json records", bytes < expected.bytes ? " (truncated)" : "");
    }
    files.push_back(std::make_unique<PieceFile>(path, manifest.data_files()));
  }
  return files;
}

std::map<std::string, std::vector<StoredRef>> stored_tensors(const std::vector<std::unique_ptr<PieceFile>>& files) {
  std::map<std::string, std::vector<StoredRef>> tensors;
  for (std::size_t f = 0; f < files.size(); ++f) {
    for (std::size_t i = 0; i < files[f]->pieces().size(); ++i) {
      tensors[files[f]->pieces()[i].piece.tensor].push_back({f, i});
    }
  }
  for (const auto& [name, refs] : tensors) {
    std::vector<Piece> pieces;
    for (const StoredRef& ref : refs) pieces.push_back(files[ref.file]->pieces()[ref.index].piece);
    try {
      check_cover(pieces);
    } catch (const Error& error) {
      std::string where;
      for (const StoredRef& ref : refs) where += (where.empty() ? "" : ", ") + files[ref.file]->path();
      fail(ErrorCategory::corrupt_data, error.what(), " in the files ", where);
    }
  }
  return tensors;
}

Tensor assemble_tensor(const std::vector<std::unique_ptr<PieceFile>>& files, const std::vector<StoredRef>& pieces) {
  const PieceEntry& first = files[pieces.front().file]->pieces()[pieces.front().index];
  const Shape& global = first.piece.global;
  Tensor whole = Tensor::empty(global, first.dtype);
  const Piece all{first.piece.tensor, global, std::vector<std::int64_t>(static_cast<std::size_t>(global.rank()), 0),
                  global, 0, global.numel()};
  const std::size_t element = dtype_size(first.dtype);
  for (const StoredRef& ref : pieces) {
    const PieceEntry& e = files[ref.file]->pieces()[ref.index];
    require(e.dtype == first.dtype, "checkpoint tensor '", e.piece.tensor, "' has pieces of ", first.dtype, " and of ",
            e.dtype);
    const Tensor data = files[ref.file]->read(ref.index);
    for (const Copy& c : overlap(e.piece, all)) {
      std::memcpy(static_cast<char*>(whole.raw_data()) + c.to * element,
                  static_cast<const char*>(data.raw_data()) + c.from * element, c.count * element);
    }
  }
  return whole;
}

void verify_sharded(const std::string& dir, const CheckpointManifest& manifest, int part, int parts) {
  stored_tensors(open_piece_files(dir, manifest));
  for (int r = part; r < manifest.world; r += parts) {
    const std::string name = rank_file_name(r), path = (fs::path(dir) / name).string();
    const FileDigest d = digest_at_rest(path, manifest.data_files());
    const CheckpointManifest::File& expected = manifest.files.at(name);
    if (d.crc32 != expected.crc32) {
      fail(ErrorCategory::corrupt_data, "checkpoint file '", path, "' is damaged: CRC-32 ", d.crc32, ", expected ",
           expected.crc32);
    }
  }
}

void load_sharded(const std::string& dir, const CheckpointManifest& manifest, model::Model& model,
                  optim::Optimizer& optimizer) {
  const std::vector<std::unique_ptr<PieceFile>> files = open_piece_files(dir, manifest);
  const std::map<std::string, std::vector<StoredRef>> stored = stored_tensors(files);
  // (Which other ranks hold the same pieces does not matter to a load.)
  const std::vector<HeldPiece> held = held_pieces(model, optimizer, model.tensor_rank(), model.tensor_ranks());
  // The checkpoint holds exactly this run's tensors, each with its global shape and dtype.
  std::map<std::string, std::pair<Shape, DType>> expected;
  const model::ParameterSpace& space = model.parameter_space();
  for (const model::Slot& slot : space.slots()) {
    const model::Parameter& p = *slot.parameter;
    expected[p.name()] = {p.partition().global, p.dtype()};
    for (const std::string& kind : optimizer.state_kinds()) expected[p.name() + "." + kind] = {p.partition().global, DType::f32};
  }
  for (const auto& [name, want] : expected) {
    const auto it = stored.find(name);
    if (it == stored.end()) {
      fail(ErrorCategory::invalid_argument, "checkpoint '", dir, "' has no tensor '", name,
           "' (saved with other model or optimizer settings?)");
    }
    const PieceEntry& first = files[it->second.front().file]->pieces()[it->second.front().index];
    require(first.piece.global == want.first && first.dtype == want.second, "checkpoint tensor '", name, "' in '", dir,
            "' is ", first.dtype, " ", first.piece.global, " but the run expects ", want.second, " ", want.first);
    for (const StoredRef& ref : it->second) {
      const PieceEntry& e = files[ref.file]->pieces()[ref.index];
      require(e.dtype == want.second, "checkpoint tensor '", name, "': a piece in '", files[ref.file]->path(), "' is ",
              e.dtype, ", not ", want.second);
    }
  }
  for (const auto& [name, refs] : stored) {
    if (expected.count(name) == 0) {
      fail(ErrorCategory::invalid_argument, "checkpoint '", dir, "' holds tensor '", name,
           "' that this run has no place for (saved with other model or optimizer settings?)");
    }
  }
  // Stage this rank's part on the host, reading each stored piece that overlaps it once.
  std::unordered_map<std::string, std::vector<std::size_t>> held_of;
  std::vector<Tensor> staged;
  for (std::size_t h = 0; h < held.size(); ++h) {
    held_of[held[h].piece.tensor].push_back(h);
    staged.push_back(Tensor::empty({held[h].piece.numel()}, held[h].target.dtype()));
  }
  for (std::size_t f = 0; f < files.size(); ++f) {
    for (std::size_t i = 0; i < files[f]->pieces().size(); ++i) {
      const PieceEntry& e = files[f]->pieces()[i];
      const auto mine = held_of.find(e.piece.tensor);
      if (mine == held_of.end()) continue;
      std::vector<std::pair<std::size_t, std::vector<Copy>>> copies;
      for (const std::size_t h : mine->second) {
        std::vector<Copy> c = overlap(e.piece, held[h].piece);
        if (!c.empty()) copies.emplace_back(h, std::move(c));
      }
      if (copies.empty()) continue;
      const Tensor data = files[f]->read(i);  // verified against its CRC-32
      const std::size_t element = dtype_size(e.dtype);
      for (const auto& [h, list] : copies) {
        for (const Copy& c : list) {
          std::memcpy(static_cast<char*>(staged[h].raw_data()) + c.to * element,
                      static_cast<const char*>(data.raw_data()) + c.from * element, c.count * element);
        }
      }
    }
  }
  // Everything read and verified: now the model and optimizer change.
  for (std::size_t h = 0; h < held.size(); ++h) copy(held[h].target, staged[h]);
  optimizer.set_steps_taken(manifest.optimizer_steps);
}

}  // namespace loom::io::detail
