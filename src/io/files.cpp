#include "loom/io/files.hpp"

#include <zlib.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "loom/core/error.hpp"

namespace loom::io {

namespace {
std::atomic<bool> group_readable{false};
}  // namespace

void set_group_readable(bool readable) { group_readable.store(readable); }
unsigned private_file_mode() { return group_readable.load() ? 0640 : 0600; }
unsigned private_directory_mode() { return group_readable.load() ? 0750 : 0700; }

void make_private(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) fail(ErrorCategory::io, "cannot stat '", path, "': ", std::strerror(errno));
  const unsigned mode = S_ISDIR(info.st_mode) ? private_directory_mode() : private_file_mode();
  if (::chmod(path.c_str(), mode) != 0) {
    fail(ErrorCategory::io, "cannot make '", path, "' owner-only: ", std::strerror(errno));
  }
}

void create_private_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, private_file_mode());
  if (fd < 0) fail(ErrorCategory::io, "cannot create '", path, "': ", std::strerror(errno));
  const int rc = ::fchmod(fd, private_file_mode());  // the umask, or an older file's mode
  const int saved = errno;
  ::close(fd);
  if (rc != 0) fail(ErrorCategory::io, "cannot make '", path, "' owner-only: ", std::strerror(saved));
}

void create_private_directories(const std::string& path) {
  std::filesystem::path so_far;
  for (const std::filesystem::path& part : std::filesystem::path(path)) {
    so_far /= part;
    if (so_far.empty() || std::filesystem::exists(so_far)) continue;
    if (::mkdir(so_far.c_str(), private_directory_mode()) != 0 && errno != EEXIST) {
      fail(ErrorCategory::io, "cannot create the directory '", so_far.string(), "': ", std::strerror(errno));
    }
    make_private(so_far.string());  // mkdir's mode passes through the umask
  }
}

void require_not_writable_by_others(const std::string& dir, const char* what) {
  struct stat info {};
  if (::stat(dir.c_str(), &info) != 0) return;  // not there yet: it will be made owner-only
  if ((info.st_mode & S_IWOTH) == 0) return;
  char octal[8];
  std::snprintf(octal, sizeof octal, "%04o", static_cast<unsigned>(info.st_mode & 07777));
  fail(ErrorCategory::invalid_argument, what, " '", dir, "' has mode ", octal,
       ": others may write into it, so anyone could replace what loom keeps there; run: chmod o-w '", dir, "'");
}


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
    create_private_file(temporary);
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
