// How convert/ writes a file: whole, under a temporary name, then renamed into place.
#pragma once

#include <functional>
#include <string>

namespace loom::convert::detail {

// Calls write(path + ".tmp"), then renames it over path and syncs the directory; the temporary is
// removed when either fails (the error goes on, as an io Error for the rename).
void write_then_rename(const std::string& path, const std::function<void(const std::string&)>& write);

}  // namespace loom::convert::detail
