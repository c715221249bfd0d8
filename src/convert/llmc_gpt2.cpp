#include "loom/convert/llmc_gpt2.hpp"

#include <array>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>

#include "loom/core/error.hpp"
#include "loom/io/files.hpp"
#include "loom/kernels/cast.hpp"
#include "src/convert/llmc_layout.hpp"
#include "src/convert/output.hpp"
#include "src/convert/tensor_layout.hpp"

namespace loom::convert {

using namespace detail;

GPTWeights read_llmc_gpt2(const std::string& path) {
  const std::string bytes = io::read_file(path);
  GPTWeights weights = parse_llmc_gpt2(bytes, path);
  check_gpt_weights(weights);
  return weights;
}

void write_llmc_gpt2(const GPTWeights& weights, const std::string& path) {
  check_gpt_weights(weights);
  const nn::GPTConfig& c = weights.config;
  for (const auto& [field, value] : {std::pair{"context", c.context}, std::pair{"vocab_size", c.vocab_size},
                                     std::pair{"layers", c.layers}, std::pair{"heads", c.heads},
                                     std::pair{"channels", c.channels}}) {
    require(value <= std::numeric_limits<std::int32_t>::max(), "llm.c's model file holds ", field,
            " as an int32; ", value, " does not fit");
  }
  // llm.c has no f16 model file: f16 widens to f32 exactly.
  const bool bf16 = weights.tensors.at("wte").dtype() == DType::bf16;
  const DType dtype = bf16 ? DType::bf16 : DType::f32;
  const std::int64_t file_vocab = (c.vocab_size + 127) / 128 * 128;
  std::array<std::int32_t, 256> header{};
  header[0] = llmc_model_magic;
  header[1] = bf16 ? version_bf16 : version_fp32;
  header[2] = static_cast<std::int32_t>(c.context);
  header[3] = static_cast<std::int32_t>(c.vocab_size);
  header[4] = static_cast<std::int32_t>(c.layers);
  header[5] = static_cast<std::int32_t>(c.heads);
  header[6] = static_cast<std::int32_t>(c.channels);
  header[7] = static_cast<std::int32_t>(file_vocab);
  detail::write_then_rename(path, [&](const std::string& temporary) {
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> owned(std::fopen(temporary.c_str(), "wb"), &std::fclose);
    std::FILE* file = owned.get();
    if (file == nullptr) fail(ErrorCategory::io, "cannot open '", temporary, "' for writing");
    bool ok = std::fwrite(header.data(), sizeof(header), 1, file) == 1;
    auto put = [&](const Tensor& t) {
      Tensor out = t;
      if (t.dtype() != dtype) {
        out = Tensor::empty(t.shape(), dtype);
        kernels::cast(t, out);
      }
      ok = ok && std::fwrite(out.raw_data(), 1, out.nbytes(), file) == out.nbytes();
    };
    for (const FileTensor& t : file_tensors) {
      if (!t.per_layer) {
        const Tensor& tensor = weights.tensors.at(t.loom);
        // The rows past the vocabulary are padding: written as zeros, as llm.c pads.
        put(std::string_view(t.llmc) == "wte" ? detail::with_rows(tensor.slice(0, c.vocab_size), file_vocab) : tensor);
        continue;
      }
      for (std::int64_t l = 0; l < c.layers; ++l) put(weights.tensors.at(layer_name(l, t.loom)));
    }
    ok = std::fclose(owned.release()) == 0 && ok;
    if (!ok) fail(ErrorCategory::io, "cannot write '", temporary, "'");
    io::sync_path(temporary);
  });
}

}  // namespace loom::convert
