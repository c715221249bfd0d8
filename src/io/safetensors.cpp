#include "loom/io/safetensors.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <set>

#include "loom/core/error.hpp"
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

void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
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
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail(ErrorCategory::io, "cannot create '", path, "'");
  const std::uint64_t length = text.size();
  unsigned char prefix[8];
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<unsigned char>(length >> (8 * i));
  out.write(reinterpret_cast<const char*>(prefix), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const Tensor& t : host) out.write(static_cast<const char*>(t.raw_data()), static_cast<std::streamsize>(t.nbytes()));
  out.flush();
  if (!out) fail(ErrorCategory::io, "cannot write '", path, "'");
  out.close();
  sync_path(path);
}

SafetensorsContents read_safetensors(const std::string& path) { return parse_safetensors(read_file(path), path); }

SafetensorsContents parse_safetensors(std::string_view file, const std::string& path) {
  auto corrupt = [&](auto&&... parts) {
    fail(ErrorCategory::corrupt_data, "safetensors '", path, "': ", std::forward<decltype(parts)>(parts)...);
  };
  if (file.size() < 8) corrupt("only ", file.size(), " bytes, shorter than the 8-byte header length (truncated)");
  std::uint64_t length = 0;
  for (int i = 0; i < 8; ++i) length |= static_cast<std::uint64_t>(static_cast<unsigned char>(file[i])) << (8 * i);
  if (length > file.size() - 8) corrupt("header of ", length, " bytes does not fit in ", file.size(), " bytes (truncated)");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(file.begin() + 8, file.begin() + 8 + static_cast<std::ptrdiff_t>(length));
  } catch (const nlohmann::json::exception& e) {
    corrupt("header is not valid JSON (", e.what(), ")");
  }
  if (!header.is_object()) corrupt("header is not a JSON object");
  const std::uint64_t data_begin = 8 + length, data_bytes = file.size() - data_begin;
  SafetensorsContents contents;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) corrupt("__metadata__ is not an object");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) corrupt("metadata '", key, "' is not a string");
        contents.metadata[key] = value.get<std::string>();
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
    Tensor t = Tensor::empty(shape, dtype);
    if (expected > 0) std::memcpy(t.raw_data(), file.data() + data_begin + begin, expected);
    contents.tensors.emplace(name, std::move(t));
    ranges.emplace_back(begin, end);
  }
  std::sort(ranges.begin(), ranges.end());
  std::uint64_t covered = 0;
  for (const auto& [begin, end] : ranges) {
    if (begin != covered) corrupt("tensor data ranges overlap or leave a gap at byte ", covered);
    covered = end;
  }
  if (covered != data_bytes) corrupt(data_bytes - covered, " trailing bytes after the last tensor");
  return contents;
}

}  // namespace loom::io
