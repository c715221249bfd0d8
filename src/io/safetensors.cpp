#include "loom/io/safetensors.hpp"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <set>
#include <thread>

#include "loom/core/error.hpp"
#include "loom/io/at_rest.hpp"
#include "loom/io/files.hpp"

namespace loom::io {

namespace {

DType parse_dtype_name(const std::string& name, const std::string& path, const std::string& tensor) {
  if (name == "F32") return DType::f32;
  if (name == "F16") return DType::f16;
  if (name == "BF16") return DType::bf16;
  if (name == "I32") return DType::i32;
  if (name == "I64") return DType::i64;
  if (name == "U8") return DType::u8;
  if (name == "U16") return DType::u16;
  fail(ErrorCategory::corrupt_data, "safetensors '", path, "': tensor '", tensor, "' has unsupported dtype '", name,
       "'");
}

}  // namespace

std::string safetensors_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32: return "F32";
    case DType::f16: return "F16";
    case DType::bf16: return "BF16";
    case DType::i32: return "I32";
    case DType::i64: return "I64";
    case DType::u8: return "U8";
    case DType::u16: return "U16";
  }
  fail(ErrorCategory::invalid_argument, "no safetensors name for dtype ", dtype);
}

namespace {


}  // namespace

FileDigest write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                             const std::map<std::string, std::string>& metadata,
                             std::span<const std::uint32_t> tensor_crcs, double max_bytes_per_second) {
  require(tensor_crcs.empty() || tensor_crcs.size() == tensors.size(), "safetensors '", path, "': ",
          tensor_crcs.size(), " CRC-32s for ", tensors.size(), " tensors");
  require(max_bytes_per_second >= 0 && std::isfinite(max_bytes_per_second), "safetensors '", path,
          "': the write rate limit must be >= 0 bytes/s (0: none), got ", max_bytes_per_second);
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> names;
  std::vector<Tensor> host;
  std::uint64_t offset = 0;
  for (const NamedTensor& t : tensors) {
    require(t.tensor.defined(), "safetensors '", path, "': tensor '", t.name, "' is undefined");
    require(t.name != "__metadata__" && names.insert(t.name).second, "safetensors '", path, "': tensor name '",
            t.name, "' is reserved or repeated");
    host.push_back(t.tensor.to(Device::cpu()));
    const std::uint64_t bytes = host.back().nbytes();
    header[t.name] = {{"dtype", safetensors_dtype(t.tensor.dtype())},
                      {"shape", t.tensor.shape().extents()},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.resize((text.size() + 7) / 8 * 8, ' ');
  // Owner-only, encrypted when the process has a key (io/at_rest.hpp), paced when asked.
  OutputFile out(path, max_bytes_per_second);
  const std::uint64_t length = text.size();
  unsigned char prefix[8];
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<unsigned char>(length >> (8 * i));
  out.write(prefix, 8);
  out.write(text.data(), text.size());
  for (std::size_t i = 0; i < host.size(); ++i) {
    // With the tensor's CRC-32 known, the file's is combined from it instead of computed again.
    if (tensor_crcs.empty()) {
      out.write(host[i].raw_data(), host[i].nbytes());
    } else {
      out.write_known(host[i].raw_data(), host[i].nbytes(), tensor_crcs[i]);
    }
  }
  return out.finish();
}

SafetensorsWriter::SafetensorsWriter(const std::string& path, std::vector<Spec> specs,
                                     const std::map<std::string, std::string>& metadata)
    : path_(path), specs_(std::move(specs)) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> names;
  std::uint64_t offset = 0;
  for (const Spec& spec : specs_) {
    require(spec.name != "__metadata__" && names.insert(spec.name).second, "safetensors '", path, "': tensor name '",
            spec.name, "' is reserved or repeated");
    const std::uint64_t bytes = static_cast<std::uint64_t>(spec.shape.numel()) * dtype_size(spec.dtype);
    header[spec.name] = {{"dtype", safetensors_dtype(spec.dtype)},
                         {"shape", spec.shape.extents()},
                         {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.resize((text.size() + 7) / 8 * 8, ' ');
  file_ = std::make_unique<OutputFile>(path);  // owner-only; encrypted when the process has a key
  const std::uint64_t length = text.size();
  unsigned char prefix[8];
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<unsigned char>(length >> (8 * i));
  file_->write(prefix, 8);
  file_->write(text.data(), text.size());
}

SafetensorsWriter::~SafetensorsWriter() = default;

void SafetensorsWriter::write(const std::string& name, const Tensor& tensor) {
  require(next_ < specs_.size(), "safetensors '", path_, "': '", name, "' is one tensor more than the header lists");
  const Spec& spec = specs_[next_];
  require(name == spec.name && tensor.dtype() == spec.dtype && tensor.shape().numel() == spec.shape.numel(),
          "safetensors '", path_, "': the next tensor is '", spec.name, "' ", spec.dtype, " ", spec.shape, ", got '",
          name, "' ", tensor);
  const Tensor host = tensor.to(Device::cpu());
  file_->write(host.raw_data(), host.nbytes());
  ++next_;
}

FileDigest SafetensorsWriter::finish() {
  require(next_ == specs_.size(), "safetensors '", path_, "': ", specs_.size() - next_, " tensor(s) were not written");
  return file_->finish();
}

SafetensorsContents read_safetensors(const std::string& path) { return parse_safetensors(read_at_rest(path), path); }

namespace {

// The checks every reader makes: header = the JSON after the 8-byte length; data_bytes: what the
// file holds after the header.
SafetensorsIndex parse_index(std::string_view header_text, std::uint64_t data_start, std::uint64_t data_bytes,
                             const std::string& path) {
  auto corrupt = [&](auto&&... parts) {
    fail(ErrorCategory::corrupt_data, "safetensors '", path, "': ", std::forward<decltype(parts)>(parts)...);
  };
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(header_text.begin(), header_text.end());
  } catch (const nlohmann::json::exception& e) {
    corrupt("header is not valid JSON (", e.what(), ")");
  }
  if (!header.is_object()) corrupt("header is not a JSON object");
  SafetensorsIndex index;
  index.data_start = data_start;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) corrupt("__metadata__ is not an object");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) corrupt("metadata '", key, "' is not a string");
        index.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") || !entry.contains("data_offsets") ||
        !entry["dtype"].is_string() || !entry["shape"].is_array() || !entry["data_offsets"].is_array() ||
        entry["data_offsets"].size() != 2) {
      corrupt("tensor '", name, "' lacks a dtype, shape or data_offsets pair");
    }
    const DType dtype = parse_dtype_name(entry["dtype"].get<std::string>(), path, name);
    std::vector<std::int64_t> extents;
    for (const auto& e : entry["shape"]) {
      if (!e.is_number_integer() || e.get<std::int64_t>() < 0) corrupt("tensor '", name, "' has a bad shape");
      extents.push_back(e.get<std::int64_t>());
    }
    const auto& offsets = entry["data_offsets"];
    if (!offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned()) {
      corrupt("tensor '", name, "' has non-integer data offsets");
    }
    const std::uint64_t begin = offsets[0].get<std::uint64_t>(), end = offsets[1].get<std::uint64_t>();
    Shape shape;
    try {
      shape = Shape(extents);
    } catch (const Error&) {
      corrupt("tensor '", name, "' has a shape whose size overflows");
    }
    if (static_cast<std::uint64_t>(shape.numel()) > data_bytes / dtype_size(dtype)) {
      corrupt("tensor '", name, "' has shape ", shape, " of ", dtype, ", larger than the ", data_bytes, " data bytes");
    }
    const std::uint64_t expected = static_cast<std::uint64_t>(shape.numel()) * dtype_size(dtype);
    if (begin > end || end > data_bytes) {
      corrupt("tensor '", name, "' spans bytes [", begin, ", ", end, ") outside the ", data_bytes, " data bytes",
              end > data_bytes ? " (truncated)" : "");
    }
    if (end - begin != expected) {
      corrupt("tensor '", name, "' has ", end - begin, " bytes but its shape ", shape, " of ", dtype, " needs ",
              expected);
    }
    index.entries.emplace(name, SafetensorsEntry{dtype, shape, begin, end});
    ranges.emplace_back(begin, end);
  }
  std::sort(ranges.begin(), ranges.end());
  std::uint64_t covered = 0;
  for (const auto& [begin, end] : ranges) {
    if (begin != covered) corrupt("tensor data ranges overlap or leave a gap at byte ", covered);
    covered = end;
  }
  if (covered != data_bytes) corrupt(data_bytes - covered, " trailing bytes after the last tensor");
  return index;
}

std::uint64_t header_length(const unsigned char* prefix) {
  std::uint64_t length = 0;
  for (int i = 0; i < 8; ++i) length |= static_cast<std::uint64_t>(prefix[i]) << (8 * i);
  return length;
}

}  // namespace

SafetensorsIndex read_safetensors_index(PlaintextReader& file) {
  const std::uint64_t size = file.size();
  if (size < 8) {
    fail(ErrorCategory::corrupt_data, "safetensors '", file.path(), "': only ", size,
         " bytes, shorter than the 8-byte header length (truncated)");
  }
  unsigned char prefix[8];
  file.read(prefix, 8, 0);
  const std::uint64_t length = header_length(prefix);
  if (length > size - 8) {
    fail(ErrorCategory::corrupt_data, "safetensors '", file.path(), "': header of ", length, " bytes does not fit in ",
         size, " bytes (truncated)");
  }
  std::string header(length, '\0');
  file.read(header.data(), length, 8);
  return parse_index(header, 8 + length, size - 8 - length, file.path());
}

SafetensorsIndex read_safetensors_index(const std::string& path) {
  PlaintextReader file(path);
  return read_safetensors_index(file);
}

Tensor read_safetensors_tensor(PlaintextReader& file, const SafetensorsIndex& index, const std::string& name) {
  const auto it = index.entries.find(name);
  require(it != index.entries.end(), "safetensors '", file.path(), "' has no tensor '", name, "'");
  const SafetensorsEntry& entry = it->second;
  Tensor t = Tensor::empty(entry.shape, entry.dtype);
  if (entry.end > entry.begin) file.read(t.raw_data(), entry.end - entry.begin, index.data_start + entry.begin);
  return t;
}

SafetensorsContents parse_safetensors(std::string_view file, const std::string& path) {
  if (file.size() < 8) {
    fail(ErrorCategory::corrupt_data, "safetensors '", path, "': only ", file.size(),
         " bytes, shorter than the 8-byte header length (truncated)");
  }
  const std::uint64_t length = header_length(reinterpret_cast<const unsigned char*>(file.data()));
  if (length > file.size() - 8) {
    fail(ErrorCategory::corrupt_data, "safetensors '", path, "': header of ", length, " bytes does not fit in ",
         file.size(), " bytes (truncated)");
  }
  const SafetensorsIndex index = parse_index(file.substr(8, length), 8 + length, file.size() - 8 - length, path);
  SafetensorsContents contents;
  contents.metadata = index.metadata;
  for (const auto& [name, entry] : index.entries) {
    Tensor t = Tensor::empty(entry.shape, entry.dtype);
    if (entry.end > entry.begin) std::memcpy(t.raw_data(), file.data() + index.data_start + entry.begin, entry.end - entry.begin);
    contents.tensors.emplace(name, std::move(t));
  }
  return contents;
}

}  // namespace loom::io
