#include "src/convert/output.hpp"

#include <filesystem>
#include <system_error>

#include "loom/core/error.hpp"
#include "loom/io/files.hpp"

namespace loom::convert::detail {

namespace fs = std::filesystem;

void write_then_rename(const std::string& path, const std::function<void(const std::string&)>& write) {
  require(!fs::is_directory(path), "'", path, "' is a directory; give a file to write");
  const std::string temporary = path + ".tmp";
  std::error_code ignored;
  try {
    write(temporary);
    std::error_code error;
    fs::rename(temporary, path, error);
    if (error) fail(ErrorCategory::io, "cannot rename '", temporary, "' to '", path, "': ", error.message());
  } catch (...) {
    fs::remove(temporary, ignored);
    throw;
  }
  const fs::path parent = fs::absolute(fs::path(path)).parent_path();
  io::sync_path(parent.string());
}

}  // namespace loom::convert::detail
