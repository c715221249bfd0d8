// loom-convert: GPT-2 weights between Hugging Face, llm.c and loom (convert/gpt_weights.hpp).
//   loom-convert convert SRC DST [--dtype D]   e.g. hf:gpt2 loom:gpt2.safetensors, or a fine-tuned
//                                              run directory to hf:out (every pair of formats)
//   loom-convert inspect SRC                   the architecture, dtype and parameter count
//   loom-convert logits SRC TOKENS OUT         the model's fp32 logits on the token ids in TOKENS
//                                              (one sequence per line, equal lengths), written to
//                                              OUT as little-endian f32 [B, T, vocab]: to compare
//                                              with another framework's
// SRC and DST: hf:DIR, llmc:FILE, loom:PATH (a checkpoint, run directory or .safetensors file).
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>
#include <vector>

#include "loom/convert/gpt_weights.hpp"
#include "loom/core/error.hpp"
#include "loom/kernels/cast.hpp"
#include "loom/nn/gpt.hpp"

namespace {

using loom::convert::GPTWeights;

std::string describe(const GPTWeights& w) {
  const loom::nn::GPTConfig& c = w.config;
  return loom::detail::concat("GPT with ", c.layers, " layers, ", c.heads, " heads, width ", c.channels, ", context ",
                              c.context, ", vocabulary ", c.vocab_size, " (", c.parameter_count(), " parameters, ",
                              w.tensors.at("wte").dtype(), ")");
}

void cast_all(GPTWeights& w, const std::string& name) {
  const loom::DType dtype = loom::parse_dtype(name);
  loom::require(dtype == loom::DType::f32 || dtype == loom::DType::f16 || dtype == loom::DType::bf16, "--dtype ", name,
                " is not f32, f16 or bf16");
  for (auto& [tensor_name, tensor] : w.tensors) {
    if (tensor.dtype() == dtype) continue;
    const loom::Tensor cast = loom::Tensor::empty(tensor.shape(), dtype);
    loom::kernels::cast(tensor, cast);
    tensor = cast;
  }
}

// TOKENS: one sequence of ids per line, all of one length.
loom::Tensor read_token_lines(const std::string& path) {
  std::ifstream in(path);
  loom::require(in.good(), loom::ErrorCategory::io, "cannot read '", path, "'");
  std::vector<std::int32_t> ids;
  std::int64_t rows = 0, cols = -1, line_number = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_number;
    std::istringstream fields(line);
    std::int64_t n = 0;
    for (std::int64_t id; fields >> id; ++n) {
      loom::require(id >= 0 && id <= std::numeric_limits<std::int32_t>::max(), "'", path, "' line ", line_number,
                    ": token id ", id, " is negative or beyond int32");
      ids.push_back(static_cast<std::int32_t>(id));
    }
    loom::require(fields.eof(), "'", path, "' line ", line_number, " holds something that is not a token id");
    if (n == 0) continue;
    loom::require(cols < 0 || n == cols, "'", path, "' line ", line_number, " has ", n, " ids but the first "
                  "sequence has ", cols);
    cols = n;
    ++rows;
  }
  loom::require(rows > 0, "'", path, "' holds no token ids");
  return loom::Tensor::from_vector(ids, loom::Shape{rows, cols});
}

void write_logits(const GPTWeights& w, const std::string& tokens_file, const std::string& out_file) {
  loom::nn::GPT model(w.config, loom::nn::Precision::fp32(), loom::Device::cpu());
  loom::convert::load_gpt_weights(model, w);
  model.forward(read_token_lines(tokens_file));
  const loom::Tensor& logits = model.logits();  // [B, T, padded vocabulary]
  const std::int64_t rows = logits.shape()[0] * logits.shape()[1], padded = logits.shape()[2];
  const std::vector<float> all = logits.to_vector<float>();
  std::ofstream out(out_file, std::ios::binary);
  for (std::int64_t r = 0; r < rows; ++r) {
    out.write(reinterpret_cast<const char*>(all.data() + r * padded),
              static_cast<std::streamsize>(w.config.vocab_size * sizeof(float)));
  }
  out.close();
  loom::require(out.good(), loom::ErrorCategory::io, "cannot write '", out_file, "'");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("loom-convert: GPT-2 weights between Hugging Face (hf:DIR), llm.c (llmc:FILE) and loom (loom:PATH)");
  app.require_subcommand(1);
  std::string source, destination, dtype, tokens, out;
  CLI::App* convert = app.add_subcommand("convert", "read SRC and write it as DST");
  convert->add_option("source", source, "hf:DIR, llmc:FILE or loom:PATH (checkpoint, run directory, weights file)")
      ->required();
  convert->add_option("destination", destination, "hf:DIR, llmc:FILE or loom:FILE.safetensors")->required();
  convert->add_option("--dtype", dtype, "f32, bf16 or f16 (default: as read)");
  CLI::App* inspect = app.add_subcommand("inspect", "the model's architecture, dtype and parameter count");
  inspect->add_option("source", source, "hf:DIR, llmc:FILE or loom:PATH")->required();
  CLI::App* logits = app.add_subcommand("logits", "the model's fp32 logits on token ids, as raw f32 [B, T, vocab]");
  logits->add_option("source", source, "hf:DIR, llmc:FILE or loom:PATH")->required();
  logits->add_option("tokens", tokens, "text file: one sequence of ids per line, equal lengths")->required();
  logits->add_option("out", out, "file to write")->required();
  CLI11_PARSE(app, argc, argv);
  try {
    const auto start = std::chrono::steady_clock::now();
    GPTWeights weights = loom::convert::read_gpt_weights(source);
    if (inspect->parsed()) {
      std::printf("%s: %s\n", weights.origin.c_str(), describe(weights).c_str());
    } else if (logits->parsed()) {
      write_logits(weights, tokens, out);
      std::printf("wrote the logits of %s on %s to %s\n", weights.origin.c_str(), tokens.c_str(), out.c_str());
    } else {
      if (!dtype.empty()) cast_all(weights, dtype);
      loom::convert::write_gpt_weights(weights, destination);
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::printf("%s -> %s: %s in %.2f s\n", weights.origin.c_str(), destination.c_str(), describe(weights).c_str(),
                  seconds);
    }
  } catch (const std::exception& error) {
    std::fprintf(stderr, "loom-convert: %s\n", error.what());
    return 1;
  }
  return 0;
}
