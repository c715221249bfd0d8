// GPT-2 weights that come and go: loom's GPT (nn/gpt.hpp) is GPT-2's architecture, so a GPT-2
// trained by Hugging Face transformers or llm.c is a loom GPT under other names and layouts.
// GPTWeights holds a model's weights in loom's names and layout, whichever file they came from;
// load_gpt_weights puts them into a model (any precision, ZeRO stage or tensor group), and the
// readers and writers of each format translate:
//
//   loom (GPTWeights)            Hugging Face (hf_gpt2.hpp)             llm.c (llmc_gpt2.hpp)
//   wte [Vp, C], Vp = V to 64    transformer.wte.weight [V, C]          wte [Vp', C], Vp' = V to 128
//   wpe [T, C]                   transformer.wpe.weight                 wpe
//   hL.ln1.weight / .bias        transformer.h.L.ln_1.weight / .bias    ln1w / ln1b [L, C]
//   hL.attn.qkv.weight [3C, C]   transformer.h.L.attn.c_attn.weight     qkvw [L, 3C, C]
//                                [C, 3C] (Conv1D: stored [in, out])
//   hL.attn.proj.weight [C, C]   ...attn.c_proj.weight (transposed)     attprojw
//   hL.ln2.*                     ...ln_2.*                              ln2w / ln2b
//   hL.mlp.fc.weight [4C, C]     ...mlp.c_fc.weight [C, 4C]             fcw
//   hL.mlp.proj.weight [C, 4C]   ...mlp.c_proj.weight [4C, C]           fcprojw
//   ln_f.*                       transformer.ln_f.*                     lnfw / lnfb
//   (head tied to wte)           lm_head.weight, tied (usually absent)  (tied)
// q, k and v lie one after another along the output dimension in all three, each split by heads
// into contiguous blocks; biases have the same order. The rows of wte past the vocabulary are
// padding the loss never reads: imports make them zeros, exports drop them (Hugging Face) or
// write zeros (llm.c).
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "loom/core/tensor.hpp"
#include "loom/nn/gpt.hpp"

namespace loom::convert {

struct GPTWeights {
  nn::GPTConfig config;                   // the architecture: vocab_size, context, layers, heads, channels
  std::map<std::string, Tensor> tensors;  // loom's names and shapes; CPU; all f32, all f16 or all bf16
  std::string origin;                     // where they were read from ("hf:DIR", ...), for messages and logs
};

// The parameters a GPT of `config` has, by name with their whole shapes, in the model's order.
std::vector<std::pair<std::string, Shape>> gpt_tensor_shapes(const nn::GPTConfig& config);

// Throws an invalid_argument Error naming the first problem: an invalid config, a tensor missing,
// of another shape than the config makes, or not a float, tensors of different dtypes, a tensor
// that no GPT parameter is.
void check_gpt_weights(const GPTWeights& weights);

// Sets every parameter of the model (the part of it this rank holds) from weights, rounded to the
// model's storage dtype; the model's architecture must be the weights' (an invalid_argument Error
// names the field that differs). Its parameter space records the origin ("loaded from ...").
// Execution choices (attention kernel, checkpointing) are the model's own.
void load_gpt_weights(nn::GPT& model, const GPTWeights& weights);

// loom's own files: a checkpoint directory, a run directory or a weights file
// (io::read_model_weights); written as a weights file (io::write_model_weights).
GPTWeights read_loom_gpt(const std::string& path);
void write_loom_gpt(const GPTWeights& weights, const std::string& file);

// A model named by its format:
//   hf:DIR      a Hugging Face GPT-2 directory (config.json + model.safetensors)
//   llmc:FILE   an llm.c model file (gpt2_124M.bin)
//   loom:PATH   a loom checkpoint, run directory or weights file (.safetensors)
// A path without a prefix is taken by its look: a directory with config.json is hf, other
// directories loom, a .bin file llmc, a .safetensors file loom.
GPTWeights read_gpt_weights(const std::string& source);
// Writes weights to such a destination (a loom destination is a weights file). Files are written
// whole, then renamed into place: an interrupted write leaves what was there.
void write_gpt_weights(const GPTWeights& weights, const std::string& destination);

}  // namespace loom::convert
