// Durable file operations for checkpoints: fsync'ed writes, atomic replacement by rename, and a
// CRC-32 (the zlib/PNG polynomial, so `python -c "import zlib; ..."` can check it).
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace loom::io {

std::uint32_t crc32(std::span<const unsigned char> bytes, std::uint32_t crc = 0);
// The CRC-32 of A followed by B, from crc_a, crc_b and B's length.
std::uint32_t crc32_combine(std::uint32_t crc_a, std::uint32_t crc_b, std::uint64_t length_b);
// CRC-32 and size of a whole file; io Error when it cannot be read.
struct FileDigest {
  std::uint64_t bytes = 0;
  std::uint32_t crc32 = 0;
};
FileDigest digest_file(const std::string& path);

// Owner-only output. What loom writes (checkpoints, metrics, traces, reports, the rendezvous file)
// is created owner-only, 0600 files and 0700 folders, whatever the umask; with
// set_group_readable(true) (train_gpt --group-readable) 0640 and 0750. Process-wide.
void set_group_readable(bool group_readable);
unsigned private_file_mode();
unsigned private_directory_mode();
// Gives a file or folder loom created its owner-only mode; io Error naming it on failure.
void make_private(const std::string& path);
// Creates (or empties) `path` as an owner-only file before anything is written into it, so that
// no other user can open it in between; a symbolic link there is refused. Then open it to write.
void create_private_file(const std::string& path);
// Creates the missing folders of path, each owner-only; those that exist are left as they are.
void create_private_directories(const std::string& path);
// invalid_argument Error when others may write into `dir` (anyone could replace what is there):
// a checkpoint folder must not be.
void require_not_writable_by_others(const std::string& dir, const char* what);

// fsync of a file or a directory; io Error naming the path on failure.
void sync_path(const std::string& path);
// Writes contents to path + ".tmp" (owner-only), fsyncs it, renames it over path and fsyncs the
// directory: readers see the old or the new contents, never a mix.
void write_file_atomically(const std::string& path, const std::string& contents);
std::string read_file(const std::string& path);

}  // namespace loom::io
