// llm.c's GPT-2 model file (what its train_gpt2.py writes as gpt2_124M.bin and its trainers
// checkpoint as model_NNNNNNNN.bin): a header of 256 little-endian int32 (magic 20240326, version
// 3 for fp32 or 5 for bf16, max sequence length, vocabulary size, layers, heads, channels, padded
// vocabulary size) and then the 16 parameter tensors, each layer's stacked along a leading
// dimension, in the order wte, wpe, ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw,
// fcb, fcprojw, fcprojb, lnfw, lnfb. Weights are [out, in] as in loom.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "loom/convert/gpt_weights.hpp"

namespace loom::convert {

inline constexpr std::int32_t llmc_model_magic = 20240326;
inline constexpr std::size_t llmc_model_header_bytes = 1024;

// Reads a model file; a missing file is an io Error, anything that is not a whole, consistent
// model file (short header, magic, version, sizes that are not positive or overflow, heads that do
// not divide the channels, a size that is not exactly the header plus the tensors) a
// corrupt_data Error naming the file and the problem.
GPTWeights read_llmc_gpt2(const std::string& path);
// The same from the file's bytes (name is used in errors).
GPTWeights parse_llmc_gpt2(std::string_view bytes, const std::string& name);

// Writes a model file: version 3 (fp32) from f32 or f16 weights, 5 from bf16; the vocabulary
// padded to a multiple of 128 as llm.c pads it.
void write_llmc_gpt2(const GPTWeights& weights, const std::string& path);

}  // namespace loom::convert
