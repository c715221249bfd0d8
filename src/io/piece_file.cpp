#include "loom/io/piece_file.hpp"

#include <nlohmann/json.hpp>

#include <utility>

#include "loom/core/error.hpp"
#include "loom/io/at_rest.hpp"

namespace loom::io {

namespace {

constexpr const char* table_key = "loom.pieces";

std::uint32_t crc_of(const Tensor& host) {
  return crc32({static_cast<const unsigned char*>(host.raw_data()), static_cast<std::size_t>(host.nbytes())});
}

}  // namespace

FileDigest write_piece_file(const std::string& path, std::span<const StoredPiece> pieces,
                            const std::map<std::string, std::string>& metadata, double max_bytes_per_second) {
  require(metadata.count(table_key) == 0, "piece file '", path, "': the metadata key '", table_key, "' is loom's");
  std::vector<NamedTensor> tensors;
  nlohmann::json table = nlohmann::json::array();
  std::map<std::string, int> per_tensor;
  std::vector<std::uint32_t> crcs;
  for (const StoredPiece& stored : pieces) {
    const Piece& p = stored.piece;
    p.validate();
    require(stored.data.defined() && stored.data.numel() == p.numel(), "piece file '", path, "': the piece of '",
            p.tensor, "' [", p.begin, ", ", p.end, ") has ", p.numel(), " elements but its data is ", stored.data);
    const Tensor host = stored.data.to(Device::cpu()).view(Shape{p.numel()});
    std::string entry = p.tensor;
    entry += ":";
    entry += std::to_string(per_tensor[p.tensor]++);
    crcs.push_back(crc_of(host));
    table.push_back({{"entry", entry}, {"tensor", p.tensor}, {"global", p.global.extents()}, {"offset", p.offset},
                     {"box", p.box.extents()}, {"begin", p.begin}, {"end", p.end}, {"crc32", crcs.back()}});
    tensors.push_back({std::move(entry), host});
  }
  std::map<std::string, std::string> all = metadata;
  all[table_key] = table.dump();
  return write_safetensors(path, tensors, all, crcs, max_bytes_per_second);  // one pass over the data computes every CRC-32
}

PieceFile::PieceFile(std::string path, Expect expect)
    : path_(std::move(path)),
      file_(std::make_unique<PlaintextReader>(path_, expect)),
      index_(read_safetensors_index(*file_)) {
  auto corrupt = [&](auto&&... parts) {
    fail(ErrorCategory::corrupt_data, "piece file '", path_, "': ", std::forward<decltype(parts)>(parts)...);
  };
  const auto found = index_.metadata.find(table_key);
  if (found == index_.metadata.end()) corrupt("no piece table (metadata '", table_key, "')");
  nlohmann::json table;
  try {
    table = nlohmann::json::parse(found->second);
  } catch (const nlohmann::json::exception& e) {
    corrupt("the piece table is not valid JSON (", e.what(), ")");
  }
  if (!table.is_array()) corrupt("the piece table is not a JSON array");
  std::map<std::string, bool> listed;
  for (const nlohmann::json& row : table) {
    PieceEntry e;
    // Every number is checked to be an integer first: a float would convert out of range.
    auto count = [&](const nlohmann::json& value, const char* field) {
      if (!value.is_number_integer()) corrupt("a piece table row has ", field, " = ", value.dump(), ", not an integer: ", row.dump());
      return value.get<std::int64_t>();
    };
    auto counts = [&](const char* field) {
      const nlohmann::json& list = row.at(field);
      if (!list.is_array()) corrupt("a piece table row has ", field, " that is not a list: ", row.dump());
      std::vector<std::int64_t> out;
      for (const nlohmann::json& v : list) out.push_back(count(v, field));
      return out;
    };
    try {
      if (!row.is_object() || !row.at("entry").is_string() || !row.at("tensor").is_string()) {
        corrupt("a piece table row is not an object with string entry and tensor: ", row.dump());
      }
      e.entry = row.at("entry").get<std::string>();
      e.piece.tensor = row.at("tensor").get<std::string>();
      e.piece.global = Shape(counts("global"));
      e.piece.offset = counts("offset");
      e.piece.box = Shape(counts("box"));
      e.piece.begin = count(row.at("begin"), "begin");
      e.piece.end = count(row.at("end"), "end");
      const nlohmann::json& crc = row.at("crc32");
      if (!crc.is_number_unsigned() || crc.get<std::uint64_t>() > 0xffffffffull) {
        corrupt("a piece table row has crc32 = ", crc.dump(), ", not a 32-bit unsigned integer: ", row.dump());
      }
      e.crc32 = static_cast<std::uint32_t>(crc.get<std::uint64_t>());
    } catch (const nlohmann::json::exception& error) {
      corrupt("a piece table row lacks a field (", error.what(), "): ", row.dump());
    } catch (const Error& error) {
      if (error.category() == ErrorCategory::corrupt_data) throw;
      corrupt("a piece table row has a bad shape (", error.what(), "): ", row.dump());
    }
    try {
      e.piece.validate();
    } catch (const Error& error) {
      corrupt("entry '", e.entry, "': ", error.what());
    }
    const auto it = index_.entries.find(e.entry);
    if (it == index_.entries.end()) corrupt("the piece table lists entry '", e.entry, "', which the file does not hold");
    if (it->second.shape != Shape{e.piece.numel()}) {
      corrupt("entry '", e.entry, "' is ", it->second.shape, " but its piece of '", e.piece.tensor, "' has ",
              e.piece.numel(), " elements");
    }
    if (!listed.emplace(e.entry, true).second) corrupt("the piece table lists entry '", e.entry, "' twice");
    e.dtype = it->second.dtype;
    pieces_.push_back(std::move(e));
  }
  for (const auto& [name, entry] : index_.entries) {
    if (listed.count(name) == 0) corrupt("entry '", name, "' is not in the piece table");
  }
  for (const auto& [key, value] : index_.metadata) {
    if (key != table_key) metadata_.emplace(key, value);
  }
}

Tensor PieceFile::read(std::size_t i) {
  require(i < pieces_.size(), "piece file '", path_, "': piece ", i, " of ", pieces_.size());
  const PieceEntry& e = pieces_[i];
  Tensor data = read_safetensors_tensor(*file_, index_, e.entry);
  const std::uint32_t crc = crc_of(data);
  if (crc != e.crc32) {
    fail(ErrorCategory::corrupt_data, "piece file '", path_, "': entry '", e.entry, "' (the piece [", e.piece.begin,
         ", ", e.piece.end, ") of '", e.piece.tensor, "') has CRC-32 ", crc, ", not the ", e.crc32,
         " its table records: the file is damaged");
  }
  return data;
}

}  // namespace loom::io
