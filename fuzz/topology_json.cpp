// libFuzzer target: a loom-topology-1 JSON file. Every input loads or is a loom::Error.
#include <cstddef>
#include <cstdint>
#include <string>

#include "loom/core/error.hpp"
#include "loom/topo/topology_json.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    loom::topo::topology_from_json(std::string(reinterpret_cast<const char*>(data), size), "fuzz.json");
  } catch (const loom::Error&) {
  }
  return 0;
}
