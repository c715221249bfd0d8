#include "loom/convert/gpt_weights.hpp"

#include <filesystem>
#include <optional>
#include <set>
#include <tuple>

#include "loom/convert/hf_gpt2.hpp"
#include "loom/convert/llmc_gpt2.hpp"
#include "loom/core/error.hpp"
#include "loom/io/checkpoint_tools.hpp"
#include "src/convert/output.hpp"

namespace loom::convert {

namespace fs = std::filesystem;

std::vector<std::pair<std::string, Shape>> gpt_tensor_shapes(const nn::GPTConfig& config) {
  const std::int64_t c = config.channels;
  std::vector<std::pair<std::string, Shape>> shapes{{"wte", Shape{config.padded_vocab(), c}},
                                                    {"wpe", Shape{config.context, c}}};
  for (std::int64_t l = 0; l < config.layers; ++l) {
    std::string block = "h";
    block += std::to_string(l);
    for (const auto& [name, shape] : std::vector<std::pair<const char*, Shape>>{
             {".ln1.weight", Shape{c}}, {".ln1.bias", Shape{c}},
             {".attn.qkv.weight", Shape{3 * c, c}}, {".attn.qkv.bias", Shape{3 * c}},
             {".attn.proj.weight", Shape{c, c}}, {".attn.proj.bias", Shape{c}},
             {".ln2.weight", Shape{c}}, {".ln2.bias", Shape{c}},
             {".mlp.fc.weight", Shape{4 * c, c}}, {".mlp.fc.bias", Shape{4 * c}},
             {".mlp.proj.weight", Shape{c, 4 * c}}, {".mlp.proj.bias", Shape{c}}}) {
      shapes.emplace_back(block + name, shape);
    }
  }
  shapes.emplace_back("ln_f.weight", Shape{c});
  shapes.emplace_back("ln_f.bias", Shape{c});
  return shapes;
}

void check_gpt_weights(const GPTWeights& weights) {
  const std::string& from = weights.origin.empty() ? std::string("GPT weights") : weights.origin;
  weights.config.validate();
  const std::vector<std::pair<std::string, Shape>> expected = gpt_tensor_shapes(weights.config);
  std::optional<DType> dtype;
  for (const auto& [name, shape] : expected) {
    const auto it = weights.tensors.find(name);
    require(it != weights.tensors.end(), from, ": no tensor '", name, "'");
    const Tensor& t = it->second;
    require(t.shape() == shape, from, ": tensor '", name, "' is ", t.shape(), " but a GPT of width ",
            weights.config.channels, ", vocabulary ", weights.config.vocab_size, " and context ",
            weights.config.context, " has it ", shape);
    require(t.dtype() == DType::f32 || t.dtype() == DType::f16 || t.dtype() == DType::bf16, from, ": tensor '", name,
            "' is ", t.dtype(), ", not a float (f32, f16 or bf16)");
    if (dtype) require(*dtype == t.dtype(), from, ": tensor '", name, "' is ", t.dtype(), " but the others are ", *dtype);
    require(t.device().is_cpu(), from, ": tensor '", name, "' is on ", t.device(), " (weights are held on the host)");
    dtype = t.dtype();
  }
  if (weights.tensors.size() != expected.size()) {
    std::set<std::string> known;
    for (const auto& [name, shape] : expected) known.insert(name);
    for (const auto& [name, tensor] : weights.tensors) {
      require(known.contains(name), from, ": tensor '", name, "' is no parameter of a GPT with ",
              weights.config.layers, " layers");
    }
  }
}

void load_gpt_weights(nn::GPT& model, const GPTWeights& weights) {
  check_gpt_weights(weights);
  const nn::GPTConfig& mine = model.config();
  const nn::GPTConfig& theirs = weights.config;
  for (const auto& [field, a, b] : {std::tuple{"vocab_size", mine.vocab_size, theirs.vocab_size},
                                    std::tuple{"context", mine.context, theirs.context},
                                    std::tuple{"layers", mine.layers, theirs.layers},
                                    std::tuple{"heads", mine.heads, theirs.heads},
                                    std::tuple{"channels", mine.channels, theirs.channels}}) {
    require(a == b, "the weights of ", weights.origin, " have ", field, " = ", b, " but the model has ", a);
  }
  model::ParameterSpace& space = model.parameter_space();
  for (std::size_t s = 0; s < space.slots().size(); ++s) {
    space.assign(s, weights.tensors.at(space.slots()[s].parameter->name()));
  }
  space.set_value_origin("loaded from " + weights.origin);
}

namespace {

nn::GPTConfig gpt_config_of(const io::ModelWeights& read, const std::string& path) {
  require(read.architecture == "gpt", "'", path, "' holds a ", read.architecture, " model, not a GPT");
  nn::GPTConfig config;
  for (const auto& [field, value] : {std::pair{"vocab_size", &config.vocab_size}, std::pair{"context", &config.context},
                                     std::pair{"layers", &config.layers}, std::pair{"heads", &config.heads},
                                     std::pair{"channels", &config.channels}}) {
    const auto it = read.config.find(field);
    require(it != read.config.end(), "'", path, "': the model config has no ", field);
    *value = it->second;
  }
  return config;
}

std::string precision_name(DType dtype) {
  switch (dtype) {
    case DType::f16: return "fp16";
    case DType::bf16: return "bf16";
    default: return "fp32";
  }
}

enum class Format { hf, llmc, loom };

// The format a source or destination names, and the path after its prefix.
std::pair<Format, std::string> parse_location(const std::string& location, bool reading) {
  for (const auto& [prefix, format] : {std::pair{"hf:", Format::hf}, std::pair{"llmc:", Format::llmc},
                                       std::pair{"loom:", Format::loom}}) {
    if (location.starts_with(prefix)) {
      const std::string path = location.substr(std::string_view(prefix).size());
      require(!path.empty(), "'", location, "' names no path after ", prefix);
      return {format, path};
    }
  }
  const fs::path path(location);
  if (fs::is_directory(path)) return {fs::exists(path / "config.json") ? Format::hf : Format::loom, location};
  if (path.extension() == ".bin") return {Format::llmc, location};
  if (path.extension() == ".safetensors") return {Format::loom, location};
  fail(ErrorCategory::invalid_argument, "cannot tell the format of '", location, "'", reading ? "" : " to write",
       ": name it hf:DIR (Hugging Face GPT-2), llmc:FILE (llm.c model file) or loom:PATH (loom checkpoint, run "
       "directory or .safetensors weights file)");
}

}  // namespace

GPTWeights read_loom_gpt(const std::string& path) {
  io::ModelWeights read = io::read_model_weights(path);
  GPTWeights weights{gpt_config_of(read, path), std::move(read.tensors), "loom:" + path};
  check_gpt_weights(weights);
  return weights;
}

void write_loom_gpt(const GPTWeights& weights, const std::string& file) {
  check_gpt_weights(weights);
  io::ModelWeights out;
  out.architecture = "gpt";
  const nn::GPTConfig& c = weights.config;
  out.config = {{"vocab_size", c.vocab_size}, {"context", c.context}, {"layers", c.layers}, {"heads", c.heads},
                {"channels", c.channels}};
  out.precision = precision_name(weights.tensors.at("wte").dtype());
  out.tensors = weights.tensors;
  detail::write_then_rename(file, [&](const std::string& temporary) { io::write_model_weights(temporary, out); });
}

GPTWeights read_gpt_weights(const std::string& source) {
  const auto [format, path] = parse_location(source, true);
  switch (format) {
    case Format::hf: return read_hf_gpt2(path);
    case Format::llmc: return read_llmc_gpt2(path);
    case Format::loom: return read_loom_gpt(path);
  }
  fail(ErrorCategory::invalid_argument, "unknown model format in '", source, "'");
}

void write_gpt_weights(const GPTWeights& weights, const std::string& destination) {
  const auto [format, path] = parse_location(destination, false);
  switch (format) {
    case Format::hf: return write_hf_gpt2(weights, path);
    case Format::llmc: return write_llmc_gpt2(weights, path);
    case Format::loom: return write_loom_gpt(weights, path);
  }
}

}  // namespace loom::convert
