// Hugging Face transformers' GPT-2 (GPT2LMHeadModel, GPT2Model) as a directory: config.json and
// model.safetensors, or model.safetensors.index.json and the shards it names. The mapping to
// loom's names and layouts is in convert/gpt_weights.hpp.
#pragma once

#include <string>

#include "loom/convert/gpt_weights.hpp"

namespace loom::convert {

// Reads a GPT-2 directory. The config must describe what loom's GPT computes (model_type gpt2,
// GELU tanh "gelu_new", LayerNorm epsilon 1e-5, n_inner 4 n_embd, attention scaled by
// 1/sqrt(head size) and not by layer, no cross-attention, the head tied to wte), and the tensors
// must be exactly the ones that config makes (names with or without "transformer.", lm_head equal
// to wte when present, the causal-mask buffers older versions saved skipped). Anything else is an
// invalid_argument Error naming the field or tensor; a damaged file is a corrupt_data Error.
GPTWeights read_hf_gpt2(const std::string& dir);

// Writes config.json and model.safetensors into dir (created if needed) in the layout
// save_pretrained writes: "transformer." names, Conv1D weights [in, out], the vocabulary without
// padding, no lm_head (tied), in the weights' dtype. A directory already holding another model
// (pytorch_model.bin, model.safetensors.index.json) is refused.
void write_hf_gpt2(const GPTWeights& weights, const std::string& dir);

}  // namespace loom::convert
