#include "loom/io/files.hpp"

#include <zlib.h>

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "loom/core/error.hpp"

namespace loom::io {


std::uint32_t crc32(std::span<const unsigned char> bytes, std::uint32_t crc) {
  // zlib's, in pieces its uInt length can take.
  std::size_t done = 0;
  while (done < bytes.size()) {
    const std::size_t n = std::min<std::size_t>(bytes.size() - done, std::size_t{1} << 30);
    crc = static_cast<std::uint32_t>(::crc32(crc, bytes.data() + done, static_cast<uInt>(n)));
    done += n;
  }
  return crc;
}

std::uint32_t crc32_combine(std::uint32_t crc_a, std::uint32_t crc_b, std::uint64_t length_b) {
  static_assert(sizeof(z_off_t) >= 8, "zlib lengths must hold 64-bit sizes");
  return static_cast<std::uint32_t>(::crc32_combine(crc_a, crc_b, static_cast<z_off_t>(length_b)));
}

FileDigest digest_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorCategory::io, "cannot open '", path, "' to check it");
  FileDigest digest;
  std::vector<unsigned char> buffer(1 << 20);
  while (in) {
    in.read(reinterpret_cast<char*>(buffer.data()), static_cast<std::streamsize>(buffer.size()));
    const std::size_t got = static_cast<std::size_t>(in.gcount());
    digest.crc32 = crc32(std::span(buffer.data(), got), digest.crc32);
    digest.bytes += got;
  }
  if (in.bad()) fail(ErrorCategory::io, "cannot read '", path, "'");
  return digest;
}

void sync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) fail(ErrorCategory::io, "cannot open '", path, "' to sync it: ", std::strerror(errno));
  const int rc = ::fsync(fd);
  const int saved = errno;
  ::close(fd);
  if (rc != 0) fail(ErrorCategory::io, "fsync of '", path, "' failed: ", std::strerror(saved));
}

void write_file_atomically(const std::string& path, const std::string& contents) {
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) fail(ErrorCategory::io, "cannot create '", temporary, "'");
    out << contents;
    out.flush();
    if (!out) fail(ErrorCategory::io, "cannot write '", temporary, "'");
  }
  sync_path(temporary);
  std::error_code error;
  std::filesystem::rename(temporary, path, error);
  if (error) fail(ErrorCategory::io, "cannot rename '", temporary, "' to '", path, "': ", error.message());
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  sync_path(parent.empty() ? std::string(".") : parent.string());
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorCategory::io, "cannot open '", path, "'");
  std::string contents((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) fail(ErrorCategory::io, "cannot read '", path, "'");
  return contents;
}

}  // namespace loom::io
