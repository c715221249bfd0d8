// Damage to a file, as a disk or a careless copy does it: for the tests of the readers that must
// name it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>

namespace loom::test {

// XORs the byte at `offset` of `file` with `mask` (non-zero: the byte changes).
inline void flip_byte(const std::filesystem::path& file, std::uintmax_t offset, unsigned char mask = 0x5a) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ mask);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

}  // namespace loom::test
