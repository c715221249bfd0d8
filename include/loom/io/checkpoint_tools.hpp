// What loom-ckpt does with a checkpoint directory, without a model: describe it, verify it, turn a
// sharded one into a consolidated one, and export its weights for other frameworks. Each streams
// one tensor at a time (the host holds one whole tensor and one piece, never the checkpoint).
#pragma once

#include <string>

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
// (metadata: format "pt", the architecture's config and the precision), from either layout.
void export_weights(const std::string& dir, const std::string& out_file);

}  // namespace loom::io
