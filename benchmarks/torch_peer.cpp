#include "torch_peer.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace loom::bench {

namespace {

const char* const script = LOOM_SOURCE_DIR "/benchmarks/peers/torch_gpt.py";

bool runs(const std::string& command) { return std::system((command + " > /dev/null 2>&1").c_str()) == 0; }

}  // namespace

std::optional<std::string> torch_python() {
  // Importing torch takes seconds: look once per process, not once per peer run.
  static const std::optional<std::string> found = []() -> std::optional<std::string> {
    for (const std::string python : {"/usr/bin/python3", "python3"}) {
      if (runs(python + " -c 'import torch'")) return python;
    }
    return std::nullopt;
  }();
  return found;
}

std::optional<nlohmann::json> run_torch_peer(const TorchPeerRequest& r, std::string& why_not) {
  const std::optional<std::string> python = torch_python();
  if (!python) {
    why_not = "no Python with PyTorch (apt-get install python3-torch)";
    return std::nullopt;
  }
  if (!std::filesystem::exists(script)) {
    why_not = std::string("the peer script ") + script + " is missing";
    return std::nullopt;
  }
  const std::filesystem::path out =
      std::filesystem::temp_directory_path() / ("loom_torch_peer_" + std::to_string(getpid()) + ".json");
  std::ostringstream command;
  command << *python << " " << script << " --layers " << r.model.layers << " --heads " << r.model.heads
          << " --channels " << r.model.channels << " --context " << r.model.context << " --vocab " << r.model.vocab_size
          << " --batch " << r.batch << " --steps " << r.steps << " --warmup " << r.warmup << " --ranks " << r.ranks
          << " --threads " << r.threads << " --port " << 20000 + getpid() % 20000 << " --json " << out.string()
          << " > /dev/null 2>&1";
  const int status = std::system(command.str().c_str());
  std::ifstream in(out);
  if (status != 0 || !in) {
    why_not = "the PyTorch peer failed (exit status " + std::to_string(status) + "): " + command.str();
    return std::nullopt;
  }
  nlohmann::json record = nlohmann::json::parse(in, nullptr, false);
  std::filesystem::remove(out);
  if (record.is_discarded() || !record.contains("tokens_per_s")) {
    why_not = "the PyTorch peer wrote no result";
    return std::nullopt;
  }
  return record;
}

}  // namespace loom::bench
