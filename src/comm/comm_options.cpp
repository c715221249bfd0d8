#include <charconv>
#include <cstdlib>
#include <string_view>

#include "loom/comm/communicator.hpp"
#include "loom/core/error.hpp"

namespace loom::comm {

std::chrono::milliseconds timeout_from_environment() {
  const char* value = std::getenv("LOOM_COMM_TIMEOUT_MS");
  if (value == nullptr || *value == '\0') return std::chrono::minutes(5);
  const std::string_view text(value);
  long long ms = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), ms);
  require(error == std::errc() && end == text.data() + text.size() && ms > 0, "LOOM_COMM_TIMEOUT_MS must be a "
          "positive number of milliseconds, got '", text, "'");
  return std::chrono::milliseconds(ms);
}

}  // namespace loom::comm
