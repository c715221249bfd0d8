// The llm.c model file's reader (convert/llmc_gpt2.hpp), apart from the rest of convert/: it needs
// only core, so its fuzz target builds without the model.
#include <array>
#include <cstring>

#include "loom/convert/llmc_gpt2.hpp"
#include "loom/core/error.hpp"
#include "src/convert/llmc_layout.hpp"
#include "src/convert/tensor_layout.hpp"

namespace loom::convert {

using namespace detail;

GPTWeights parse_llmc_gpt2(std::string_view bytes, const std::string& name) {
  require(bytes.size() >= llmc_model_header_bytes, ErrorCategory::corrupt_data, "llm.c model file '", name, "' has ",
          bytes.size(), " bytes, fewer than its ", llmc_model_header_bytes, "-byte header");
  std::array<std::int32_t, 256> header{};
  std::memcpy(header.data(), bytes.data(), llmc_model_header_bytes);  // little-endian, as loom's hosts are
  require(header[0] == llmc_model_magic, ErrorCategory::corrupt_data, "'", name, "' is not an llm.c model file (magic ",
          header[0], ", expected ", llmc_model_magic, ")");
  const std::int32_t version = header[1];
  require(version == version_fp32 || version == version_bf16, ErrorCategory::corrupt_data, "llm.c model file '", name,
          "' has version ", version, "; loom reads 3 (fp32) and 5 (bf16), as llm.c writes them");
  const char* fields[] = {"max_seq_len", "vocab_size", "num_layers", "num_heads", "channels", "padded_vocab_size"};
  for (int i = 0; i < 6; ++i) {
    require(header[2 + i] > 0, ErrorCategory::corrupt_data, "llm.c model file '", name, "': ", fields[i], " is ",
            header[2 + i], ", not positive");
  }
  nn::GPTConfig c;
  c.context = header[2];
  c.vocab_size = header[3];
  c.layers = header[4];
  c.heads = header[5];
  c.channels = header[6];
  const std::int64_t file_vocab = header[7];
  require(file_vocab >= c.vocab_size, ErrorCategory::corrupt_data, "llm.c model file '", name, "': padded_vocab_size ",
          file_vocab, " is below vocab_size ", c.vocab_size);
  require(c.channels % c.heads == 0, ErrorCategory::corrupt_data, "llm.c model file '", name, "': channels ",
          c.channels, " is not a multiple of num_heads ", c.heads);
  const DType dtype = version == version_bf16 ? DType::bf16 : DType::f32;
  const auto element = static_cast<std::uint64_t>(dtype_size(dtype));
  // The tensors' total size, each product checked: a header's sizes may be anything.
  std::uint64_t elements = 0;
  for (const FileTensor& t : file_tensors) {
    std::uint64_t n = 1;
    for (const std::int64_t extent : loom_extents(t, c, file_vocab)) {
      require(!__builtin_mul_overflow(n, static_cast<std::uint64_t>(extent), &n), ErrorCategory::corrupt_data,
              "llm.c model file '", name, "': its sizes overflow");
    }
    if (t.per_layer) {
      require(!__builtin_mul_overflow(n, static_cast<std::uint64_t>(c.layers), &n), ErrorCategory::corrupt_data,
              "llm.c model file '", name, "': its sizes overflow");
    }
    require(!__builtin_add_overflow(elements, n, &elements), ErrorCategory::corrupt_data, "llm.c model file '", name,
            "': its sizes overflow");
  }
  std::uint64_t expected = 0;
  require(!__builtin_mul_overflow(elements, element, &expected) &&
              !__builtin_add_overflow(expected, llmc_model_header_bytes, &expected),
          ErrorCategory::corrupt_data, "llm.c model file '", name, "': its sizes overflow");
  require(bytes.size() == expected, ErrorCategory::corrupt_data, "llm.c model file '", name, "' has ", bytes.size(),
          " bytes but its header (", c.layers, " layers, ", c.heads, " heads, width ", c.channels, ", context ",
          c.context, ", vocabulary ", c.vocab_size, " padded to ", file_vocab, ", ", dtype, ") makes it ", expected,
          bytes.size() < expected ? " (truncated)" : " (bytes after the last tensor)");
  GPTWeights weights{c, {}, "llmc:" + name};
  std::uint64_t at = llmc_model_header_bytes;
  auto next = [&](const Shape& shape) {  // the next shape.numel() elements of the file, as a tensor
    const Tensor t = Tensor::empty(shape, dtype);
    std::memcpy(t.raw_data(), bytes.data() + at, t.nbytes());
    at += t.nbytes();
    return t;
  };
  for (const FileTensor& t : file_tensors) {
    const Shape shape(loom_extents(t, c, file_vocab));
    if (!t.per_layer) {
      const Tensor read = next(shape);
      // llm.c pads its vocabulary to 128, loom to 64: the rows past the vocabulary are padding,
      // which the loss never reads, and start as zeros.
      weights.tensors[t.loom] =
          std::string_view(t.llmc) == "wte" ? detail::with_rows(read.slice(0, c.vocab_size), c.padded_vocab()) : read;
      continue;
    }
    for (std::int64_t l = 0; l < c.layers; ++l) weights.tensors[layer_name(l, t.loom)] = next(shape);
  }
  return weights;
}

}  // namespace loom::convert
