#include "loom/convert/hf_gpt2.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>
#include <utility>

#include "loom/core/error.hpp"
#include "loom/io/files.hpp"
#include "loom/io/safetensors.hpp"
#include "src/convert/output.hpp"
#include "src/convert/tensor_layout.hpp"

namespace loom::convert {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// How each Hugging Face tensor of a block becomes loom's: its name in the block and whether it is
// a Conv1D weight (stored [in, out], transposed to loom's [out, in]).
struct BlockTensor {
  const char* hf;
  const char* loom;
  bool conv1d;
};
constexpr BlockTensor block_tensors[] = {
    {"ln_1.weight", "ln1.weight", false},          {"ln_1.bias", "ln1.bias", false},
    {"attn.c_attn.weight", "attn.qkv.weight", true}, {"attn.c_attn.bias", "attn.qkv.bias", false},
    {"attn.c_proj.weight", "attn.proj.weight", true}, {"attn.c_proj.bias", "attn.proj.bias", false},
    {"ln_2.weight", "ln2.weight", false},          {"ln_2.bias", "ln2.bias", false},
    {"mlp.c_fc.weight", "mlp.fc.weight", true},      {"mlp.c_fc.bias", "mlp.fc.bias", false},
    {"mlp.c_proj.weight", "mlp.proj.weight", true},  {"mlp.c_proj.bias", "mlp.proj.bias", false},
};

std::string block_name(const char* prefix, std::int64_t layer, const char* separator, const char* tensor) {
  std::string name = prefix;
  name += std::to_string(layer);
  name += separator;
  name += tensor;
  return name;
}

// config.json's integer `field` (or the first of its aliases present), positive.
std::int64_t size_field(const json& config, std::initializer_list<const char*> names, const std::string& file) {
  for (const char* name : names) {
    if (!config.contains(name) || config[name].is_null()) continue;
    const json& value = config[name];
    require(value.is_number_integer() && value.get<std::int64_t>() > 0, "'", file, "': ", name, " is ", value.dump(),
            ", not a positive integer");
    return value.get<std::int64_t>();
  }
  fail(ErrorCategory::invalid_argument, "'", file, "' has no ", *names.begin());
}

// A setting that must have one value (or be absent, when its default is that value).
template <class T>
void require_setting(const json& config, const char* name, const T& wanted, const std::string& file, const char* why) {
  if (!config.contains(name) || config[name].is_null()) return;
  const json& value = config[name];
  bool same = false;
  if constexpr (std::is_same_v<T, bool>) same = value.is_boolean() && value.get<bool>() == wanted;
  else same = value == json(wanted);
  require(same, "'", file, "': ", name, " is ", value.dump(), " but loom's GPT ", why);
}

nn::GPTConfig read_config(const std::string& file) {
  json config = json::parse(io::read_file(file), nullptr, false);
  require(!config.is_discarded() && config.is_object(), "'", file, "' is not a JSON object");
  if (config.contains("model_type")) {
    require(config["model_type"] == "gpt2", "'", file, "': model_type is ", config["model_type"].dump(),
            "; loom imports GPT-2 models (model_type \"gpt2\")");
  }
  nn::GPTConfig c;
  c.channels = size_field(config, {"n_embd", "hidden_size"}, file);
  c.layers = size_field(config, {"n_layer", "num_hidden_layers"}, file);
  c.heads = size_field(config, {"n_head", "num_attention_heads"}, file);
  c.context = size_field(config, {"n_positions", "n_ctx", "max_position_embeddings"}, file);
  c.vocab_size = size_field(config, {"vocab_size"}, file);
  require(c.channels % c.heads == 0, "'", file, "': n_embd ", c.channels, " is not a multiple of n_head ", c.heads);
  if (config.contains("activation_function")) {
    const json& activation = config["activation_function"];
    require(activation == "gelu_new" || activation == "gelu_pytorch_tanh", "'", file, "': activation_function is ",
            activation.dump(), " but loom's GPT uses GELU's tanh form (\"gelu_new\")");
  }
  if (config.contains("layer_norm_epsilon")) {
    const json& eps = config["layer_norm_epsilon"];
    require(eps.is_number() && std::abs(eps.get<double>() - 1e-5) <= 1e-12, "'", file, "': layer_norm_epsilon is ",
            eps.dump(), " but loom's LayerNorm uses 1e-5");
  }
  if (config.contains("n_inner") && !config["n_inner"].is_null()) {
    require(config["n_inner"] == json(4 * c.channels), "'", file, "': n_inner is ", config["n_inner"].dump(),
            " but loom's MLP is 4 n_embd = ", 4 * c.channels, " wide");
  }
  require_setting(config, "scale_attn_weights", true, file, "scales attention by 1/sqrt(head size)");
  require_setting(config, "scale_attn_by_inverse_layer_idx", false, file, "does not scale attention by layer");
  require_setting(config, "add_cross_attention", false, file, "has no cross-attention");
  require_setting(config, "tie_word_embeddings", true, file, "ties the head to wte");
  return c;
}

// Every tensor of the directory's safetensors file(s), by name.
std::map<std::string, Tensor> read_tensors(const std::string& dir) {
  const fs::path root(dir);
  if (fs::exists(root / "model.safetensors")) return io::read_safetensors((root / "model.safetensors").string()).tensors;
  const fs::path index_file = root / "model.safetensors.index.json";
  if (fs::exists(index_file)) {
    json index = json::parse(io::read_file(index_file.string()), nullptr, false);
    require(!index.is_discarded() && index.contains("weight_map") && index["weight_map"].is_object(), "'",
            index_file.string(), "' has no weight_map object");
    std::set<std::string> files;
    for (const auto& [name, file] : index["weight_map"].items()) {
      require(file.is_string() && file.get<std::string>().find('/') == std::string::npos, "'", index_file.string(),
              "': tensor '", name, "' maps to ", file.dump(), ", not a file name in the directory");
      files.insert(file.get<std::string>());
    }
    std::map<std::string, Tensor> tensors;
    for (const std::string& file : files) {
      for (auto& [name, tensor] : io::read_safetensors((root / file).string()).tensors) {
        require(!tensors.contains(name), "'", dir, "': tensor '", name, "' is in two of its files");
        tensors.emplace(name, std::move(tensor));
      }
    }
    return tensors;
  }
  require(!fs::exists(root / "pytorch_model.bin"), "'", dir, "' holds pytorch_model.bin (a pickle), which loom does "
          "not read: save the model with save_pretrained(..., safe_serialization=True) to get model.safetensors");
  fail(ErrorCategory::io, "'", dir, "' has no model.safetensors (nor model.safetensors.index.json)");
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw_data(), b.raw_data(), static_cast<std::size_t>(a.nbytes())) == 0;
}

}  // namespace

GPTWeights read_hf_gpt2(const std::string& dir) {
  require(fs::is_directory(dir), "hf: '", dir, "' is not a directory (a Hugging Face model directory holds "
          "config.json and model.safetensors)");
  const std::string config_file = (fs::path(dir) / "config.json").string();
  require(fs::exists(config_file), "hf: '", dir, "' has no config.json");
  GPTWeights weights{read_config(config_file), {}, "hf:" + dir};
  std::map<std::string, Tensor> tensors = read_tensors(dir);
  // Names as save_pretrained writes them for GPT2LMHeadModel ("transformer.h.0...") or for
  // GPT2Model, as OpenAI's checkpoints on the Hub are ("h.0...").
  std::map<std::string, std::pair<std::string, Tensor>> bare;  // the file's name and tensor, by the bare name
  std::optional<Tensor> head;
  for (auto& [name, tensor] : tensors) {
    if (name == "lm_head.weight") {
      head = tensor;
      continue;
    }
    std::string key = name.starts_with("transformer.") ? name.substr(12) : name;
    // The causal mask buffers some versions saved are no weights.
    if (key.ends_with(".attn.bias") || key.ends_with(".attn.masked_bias")) continue;
    require(!bare.contains(key), "hf: '", dir, "' holds '", key, "' twice (with and without \"transformer.\")");
    bare.emplace(std::move(key), std::pair{name, tensor});
  }
  const nn::GPTConfig& c = weights.config;
  const std::string described = loom::detail::concat("config.json (n_embd ", c.channels, ", n_layer ", c.layers,
                                                     ", n_positions ", c.context, ", vocab_size ", c.vocab_size, ")");
  auto take = [&](const std::string& name, const Shape& shape) {
    const auto it = bare.find(name);
    require(it != bare.end(), "hf: '", dir, "' has no tensor '", name, "' (", described, " makes one)");
    const auto [stored, t] = it->second;
    bare.erase(it);
    require(t.shape() == shape, "hf: '", dir, "': tensor '", stored, "' is ", t.shape(), " but ", described,
            " makes it ", shape);
    return t;
  };
  const Tensor wte = take("wte.weight", Shape{c.vocab_size, c.channels});
  weights.tensors["wte"] = detail::with_rows(wte, c.padded_vocab());
  weights.tensors["wpe"] = take("wpe.weight", Shape{c.context, c.channels});
  std::map<std::string, Shape> shapes;  // loom's; a Conv1D weight is stored transposed
  for (auto& [name, shape] : gpt_tensor_shapes(c)) shapes.emplace(name, shape);
  for (std::int64_t l = 0; l < c.layers; ++l) {
    for (const BlockTensor& b : block_tensors) {
      const std::string hf = block_name("h.", l, ".", b.hf), loom = block_name("h", l, ".", b.loom);
      const Shape& shape = shapes.at(loom);
      weights.tensors[loom] = b.conv1d ? detail::transposed(take(hf, Shape{shape[1], shape[0]})) : take(hf, shape);
    }
  }
  weights.tensors["ln_f.weight"] = take("ln_f.weight", Shape{c.channels});
  weights.tensors["ln_f.bias"] = take("ln_f.bias", Shape{c.channels});
  if (!bare.empty()) {
    fail(ErrorCategory::invalid_argument, "hf: '", dir, "' holds tensor '", bare.begin()->second.first, "', which a GPT-2 of ",
         described, " has no place for");
  }
  if (head) {
    require(same_bytes(*head, wte), "hf: '", dir, "': lm_head.weight differs from wte: loom's GPT ties its head to "
            "the token embedding, so an untied head cannot be imported");
  }
  check_gpt_weights(weights);
  return weights;
}

void write_hf_gpt2(const GPTWeights& weights, const std::string& dir) {
  check_gpt_weights(weights);
  const fs::path root(dir);
  for (const char* other : {"pytorch_model.bin", "model.safetensors.index.json"}) {
    require(!fs::exists(root / other), "hf: '", dir, "' already holds ", other, " (another model); write into a new "
            "directory");
  }
  std::error_code error;
  fs::create_directories(root, error);
  if (error) fail(ErrorCategory::io, "hf: cannot create '", dir, "': ", error.message());
  const nn::GPTConfig& c = weights.config;
  std::vector<io::NamedTensor> out;
  out.push_back({"transformer.wte.weight", weights.tensors.at("wte").slice(0, c.vocab_size)});
  out.push_back({"transformer.wpe.weight", weights.tensors.at("wpe")});
  for (std::int64_t l = 0; l < c.layers; ++l) {
    for (const BlockTensor& b : block_tensors) {
      const Tensor& t = weights.tensors.at(block_name("h", l, ".", b.loom));
      out.push_back({block_name("transformer.h.", l, ".", b.hf), b.conv1d ? detail::transposed(t) : t});
    }
  }
  out.push_back({"transformer.ln_f.weight", weights.tensors.at("ln_f.weight")});
  out.push_back({"transformer.ln_f.bias", weights.tensors.at("ln_f.bias")});
  const DType dtype = weights.tensors.at("wte").dtype();
  json config = {{"architectures", {"GPT2LMHeadModel"}},
                 {"model_type", "gpt2"},
                 {"vocab_size", c.vocab_size},
                 {"n_positions", c.context},
                 {"n_embd", c.channels},
                 {"n_layer", c.layers},
                 {"n_head", c.heads},
                 {"n_inner", nullptr},
                 {"activation_function", "gelu_new"},
                 {"layer_norm_epsilon", 1e-5},
                 {"resid_pdrop", 0.1},
                 {"embd_pdrop", 0.1},
                 {"attn_pdrop", 0.1},
                 {"initializer_range", 0.02},
                 {"scale_attn_weights", true},
                 {"scale_attn_by_inverse_layer_idx", false},
                 {"reorder_and_upcast_attn", false},
                 {"tie_word_embeddings", true},
                 {"use_cache", true},
                 {"torch_dtype", dtype == DType::bf16 ? "bfloat16" : dtype == DType::f16 ? "float16" : "float32"}};
  // GPT-2's own vocabulary ends with <|endoftext|>, which it uses to begin and end text.
  if (c.vocab_size == 50257) config["bos_token_id"] = config["eos_token_id"] = 50256;
  // Both written before either replaces what is there: never new weights with an old config.
  detail::write_then_rename(
      {{(root / "model.safetensors").string(),
        [&](const std::string& temporary) { io::write_safetensors(temporary, out, {{"format", "pt"}}); }},
       {(root / "config.json").string(), [&](const std::string& temporary) {
          io::write_file_atomically(temporary, config.dump(2) + "\n");
        }}});
}

}  // namespace loom::convert
