// The safetensors format (as written by the Hugging Face safetensors library): an 8-byte
// little-endian header length N, N bytes of JSON {"name": {"dtype", "shape", "data_offsets":
// [begin, end)}, "__metadata__": {string: string}} padded with spaces to 8 bytes, then the data
// of each tensor, contiguous and in offset order. Files written here load with the standard
// readers (safetensors.torch.load_file, safe_open).
#pragma once

#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "loom/core/tensor.hpp"
#include "loom/io/files.hpp"

namespace loom::io {

class OutputFile;       // io/at_rest.hpp
class PlaintextReader;  // io/at_rest.hpp

struct NamedTensor {
  std::string name;
  Tensor tensor;  // any device; written from a host copy
};

struct SafetensorsContents {
  std::map<std::string, std::string> metadata;
  std::map<std::string, Tensor> tensors;  // CPU tensors
};

// Writes path (truncating, owner-only, encrypted when the process has a key: io/at_rest.hpp) and
// flushes it to stable storage (fsync); returns its size and CRC-32 (of the plaintext), computed
// from the bytes as they were written. Names must be unique and not "__metadata__". io
// Error on any failure.
// tensor_crcs: the CRC-32 of each tensor's bytes when the caller has them already (a piece file's
// table does); the file's CRC-32 is then combined from them (zlib's crc32_combine) instead of
// passing over the data a second time. Empty: computed here.
// max_bytes_per_second > 0: the data goes out in chunks no faster than this on average (a
// checkpoint written in the background leaves the disk and the page cache to training's reads).
FileDigest write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                             const std::map<std::string, std::string>& metadata = {},
                             std::span<const std::uint32_t> tensor_crcs = {}, double max_bytes_per_second = 0);

// Reads and validates a whole file (decrypted when encrypted: io/at_rest.hpp): a truncated file, a malformed header, an unknown dtype,
// offsets that overlap or leave the file, or a shape that does not match its byte range is a
// corrupt_data Error naming the file and the problem.
SafetensorsContents read_safetensors(const std::string& path);
// The same checks on a file's bytes already in memory; name is used in error messages.
SafetensorsContents parse_safetensors(std::string_view bytes, const std::string& name);

// Writes a safetensors file tensor by tensor, for files larger than memory: the header (every
// name, dtype and shape) first, then each tensor's bytes in that order. finish() checks that all
// were written and fsyncs; a writer destroyed before finish() removes its incomplete file.
class SafetensorsWriter {
 public:
  struct Spec {
    std::string name;
    DType dtype = DType::f32;
    Shape shape;
  };
  SafetensorsWriter(const std::string& path, std::vector<Spec> specs,
                    const std::map<std::string, std::string>& metadata = {});
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;
  // The next tensor in the order given: its name, dtype and shape must be the next spec's.
  void write(const std::string& name, const Tensor& tensor);
  // The file's size and CRC-32, computed as it was written.
  FileDigest finish();

 private:
  std::string path_;
  std::vector<Spec> specs_;
  std::size_t next_ = 0;
  std::unique_ptr<OutputFile> file_;
};

// A file's header without its data: what a reader that takes one tensor at a time needs.
struct SafetensorsEntry {
  DType dtype = DType::f32;
  Shape shape;
  std::uint64_t begin = 0, end = 0;  // byte range, from the start of the data
};
struct SafetensorsIndex {
  std::map<std::string, std::string> metadata;
  std::map<std::string, SafetensorsEntry> entries;
  std::uint64_t data_start = 0;  // the data's first byte in the file: 8 + the header's length
};
// Reads and checks only the header (the same checks as read_safetensors, against the file's
// size): from a file open for reading at offsets, plain or encrypted (io/at_rest.hpp), or by path.
SafetensorsIndex read_safetensors_index(PlaintextReader& file);
SafetensorsIndex read_safetensors_index(const std::string& path);
// One tensor of that file, read where it lies: a CPU tensor of its dtype and shape. Reading the
// tensors of an encrypted file in their file order decrypts it once, front to back.
Tensor read_safetensors_tensor(PlaintextReader& file, const SafetensorsIndex& index, const std::string& name);

// "F32", "F16", "BF16", "I32", "I64", "U8", "U16".
std::string safetensors_dtype(DType dtype);

}  // namespace loom::io
