// llm.c's model file, tensor by tensor (convert/llmc_gpt2.hpp): shared by its reader and writer.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "loom/core/shape.hpp"
#include "loom/nn/gpt.hpp"

namespace loom::convert::detail {

inline constexpr std::int32_t version_fp32 = 3, version_bf16 = 5;

// One of the file's 16 tensors: its name in llm.c, loom's name in block l (or the whole name for
// the tensors outside the blocks), and whether it is stacked over the layers.
struct FileTensor {
  const char* llmc;
  const char* loom;
  bool per_layer;
};
inline constexpr FileTensor file_tensors[] = {
    {"wte", "wte", false},
    {"wpe", "wpe", false},
    {"ln1w", "ln1.weight", true},
    {"ln1b", "ln1.bias", true},
    {"qkvw", "attn.qkv.weight", true},
    {"qkvb", "attn.qkv.bias", true},
    {"attprojw", "attn.proj.weight", true},
    {"attprojb", "attn.proj.bias", true},
    {"ln2w", "ln2.weight", true},
    {"ln2b", "ln2.bias", true},
    {"fcw", "mlp.fc.weight", true},
    {"fcb", "mlp.fc.bias", true},
    {"fcprojw", "mlp.proj.weight", true},
    {"fcprojb", "mlp.proj.bias", true},
    {"lnfw", "ln_f.weight", false},
    {"lnfb", "ln_f.bias", false},
};

inline std::string layer_name(std::int64_t layer, const char* tensor) {
  std::string name = "h";
  name += std::to_string(layer);
  name += '.';
  name += tensor;
  return name;
}

// A tensor's extents in loom (one layer's, for a stacked one), for a file whose wte has `vocab_rows` rows
// (plain extents: a header's sizes are checked for overflow before any Shape is made of them).
inline std::vector<std::int64_t> loom_extents(const FileTensor& t, const nn::GPTConfig& c,
                                              std::int64_t vocab_rows) {
  const std::int64_t ch = c.channels;
  const std::string_view name = t.llmc;
  if (name == "wte") return {vocab_rows, ch};
  if (name == "wpe") return {c.context, ch};
  if (name == "qkvw") return {3 * ch, ch};
  if (name == "qkvb") return {3 * ch};
  if (name == "attprojw") return {ch, ch};
  if (name == "fcw") return {4 * ch, ch};
  if (name == "fcb") return {4 * ch};
  if (name == "fcprojw") return {ch, 4 * ch};
  return {ch};
}

}  // namespace loom::convert::detail
