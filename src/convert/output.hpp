// How convert/ writes files: whole, under temporary names, then renamed into place.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace loom::convert::detail {

using FileWriter = std::function<void(const std::string& path)>;

// Calls each write(path + ".tmp"), and only when all succeeded renames them over their paths in
// order and syncs their directories: a failed write leaves every file as it was (the temporaries
// are removed, the error goes on). A failed rename is an io Error.
void write_then_rename(const std::vector<std::pair<std::string, FileWriter>>& files);
inline void write_then_rename(const std::string& path, const FileWriter& write) { write_then_rename({{path, write}}); }

}  // namespace loom::convert::detail
