// What loom-ckpt does with a checkpoint directory, without a model: describe it, verify it, turn a
// sharded one into a consolidated one, and export its weights for other frameworks. Each streams
// one tensor at a time (the host holds one whole tensor and one piece, never the checkpoint).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "loom/core/tensor.hpp"

namespace loom::io {

// The layout (format, ranks, step, architecture, precision, optimizer), each file (size, pieces)
// and each tensor (dtype, shape, pieces), as text. With verify_pieces, every piece is read and its
// CRC-32 checked, and the report says which fail.
std::string describe_checkpoint(const std::string& dir, bool verify_pieces);

// Writes out_dir (which must not exist) as a loom-checkpoint-1 checkpoint of whole tensors:
// model.safetensors, optimizer.safetensors and state.json, from the sharded checkpoint `dir`
// (verified first). Loads wherever `dir` loads.
void consolidate_checkpoint(const std::string& dir, const std::string& out_dir);

// Writes the model's weights alone, whole, in their stored dtype, as one safetensors file
// (metadata: format "pt", the architecture, its config and the precision), from either layout.
void export_weights(const std::string& dir, const std::string& out_file);

// A model's weights, whole and on the host, with what they are the weights of: what
// convert/ turns into other projects' formats and back.
struct ModelWeights {
  std::string architecture;                    // "gpt"
  std::map<std::string, std::int64_t> config;  // the architecture's sizes (GPT: vocab_size, context, ...)
  std::string precision;                       // what they were trained in ("fp32", "bf16", ...)
  std::map<std::string, Tensor> tensors;       // by parameter name, CPU, in their stored dtype
};

// path: a checkpoint directory of either layout (verified first), a run directory (its `latest`
// checkpoint), or a weights file export_weights or write_model_weights wrote. A file without
// loom's metadata is an invalid_argument Error naming it.
ModelWeights read_model_weights(const std::string& path);
// Writes file (truncating) as export_weights writes a weights file, tensors in name order.
void write_model_weights(const std::string& file, const ModelWeights& weights);

}  // namespace loom::io
