#include "src/convert/output.hpp"

#include <filesystem>
#include <system_error>

#include "loom/core/error.hpp"
#include "loom/io/files.hpp"

namespace loom::convert::detail {

namespace fs = std::filesystem;

void write_then_rename(const std::vector<std::pair<std::string, FileWriter>>& files) {
  for (const auto& [path, write] : files) {
    require(!fs::is_directory(path), "'", path, "' is a directory; give a file to write");
  }
  std::size_t written = 0;
  try {
    for (const auto& [path, write] : files) {
      write(path + ".tmp");
      ++written;
    }
  } catch (...) {
    std::error_code ignored;
    for (std::size_t i = 0; i <= written && i < files.size(); ++i) fs::remove(files[i].first + ".tmp", ignored);
    throw;
  }
  for (const auto& [path, write] : files) {
    std::error_code error;
    fs::rename(path + ".tmp", path, error);
    if (error) fail(ErrorCategory::io, "cannot rename '", path, ".tmp' to '", path, "': ", error.message());
    io::sync_path(fs::absolute(fs::path(path)).parent_path().string());
  }
}

}  // namespace loom::convert::detail
