// crypt_bench: loom's encryption at rest against plain file I/O of the same bytes, in the same run.
//
// For each folder given (default: /dev/shm, where the file system costs almost nothing and the
// rate is the cipher's, and /tmp, a disk), a file of --mb MiB is written plain (write + fsync)
// and encrypted (EncryptingWriter: seal + write + fsync), then read plain and decrypted
// (DecryptingReader: read + verify), round-robin over --repeats rounds; the table has the median
// GB/s of each and the encrypted/plain time ratio. One thread: the rate is per core.
#include <CLI/CLI.hpp>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "bench_report.hpp"
#include "loom/core/error.hpp"
#include "loom/crypt/encrypted_file.hpp"

namespace {

using loom::crypt::SecretKey;

void plain_write(const std::string& path, const std::vector<unsigned char>& data, std::size_t block) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  loom::require(fd >= 0, "crypt_bench: cannot create ", path);
  for (std::size_t at = 0; at < data.size(); at += block) {
    const std::size_t n = std::min(block, data.size() - at);
    loom::require(::write(fd, data.data() + at, n) == static_cast<ssize_t>(n), "crypt_bench: write failed");
  }
  ::fsync(fd);
  ::close(fd);
}

std::size_t plain_read(const std::string& path, std::vector<unsigned char>& buffer) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  loom::require(fd >= 0, "crypt_bench: cannot open ", path);
  std::size_t total = 0;
  for (ssize_t n; (n = ::read(fd, buffer.data(), buffer.size())) > 0;) total += static_cast<std::size_t>(n);
  ::close(fd);
  return total;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"crypt_bench: encryption at rest against plain file I/O, same run"};
  std::size_t mb = 256, chunk_kb = loom::crypt::default_chunk_bytes >> 10;
  int repeats = 5;
  std::vector<std::string> dirs{"/dev/shm", "/tmp"};
  std::string json;
  app.add_option("--mb", mb, "file size in MiB");
  app.add_option("--chunk-kb", chunk_kb, "encrypted chunk size in KiB");
  app.add_option("--repeats", repeats, "rounds (the median is reported)")->check(CLI::PositiveNumber);
  app.add_option("--dirs", dirs, "folders to write the files in");
  app.add_option("--json", json, "write the JSON record here");
  CLI11_PARSE(app, argc, argv);

  const SecretKey key = SecretKey::generate();
  const std::size_t bytes = mb << 20, chunk = chunk_kb << 10;
  std::vector<unsigned char> data(bytes), buffer(chunk);
  for (std::size_t i = 0; i < bytes; ++i) data[i] = static_cast<unsigned char>((i * 2654435761u) >> 13);
  nlohmann::json record = loom::bench::make_record(
      "crypt_bench", {{"mb", mb}, {"chunk_kb", chunk_kb}, {"repeats", repeats}, {"threads", 1}});
  std::printf("# crypt_bench: %zu MiB, chunks of %zu KiB, one thread, median of %d rounds\n", mb, chunk_kb, repeats);
  std::printf("# %-10s %14s %14s %8s %14s %14s %8s\n", "folder", "write GB/s", "enc. write", "ratio", "read GB/s",
              "dec. read", "ratio");
  for (const std::string& dir : dirs) {
    if (!std::filesystem::is_directory(dir)) continue;
    const std::string plain = dir + "/loom_crypt_bench_plain", encrypted = dir + "/loom_crypt_bench_encrypted";
    const auto times = loom::bench::interleaved_median_seconds(
        {[&] { plain_write(plain, data, chunk); },
         [&] {
           loom::crypt::EncryptingWriter writer(encrypted, key, chunk);
           writer.write(data);
           writer.close();
         },
         [&] { loom::require(plain_read(plain, buffer) == bytes, "crypt_bench: short plain read"); },
         [&] {
           loom::crypt::DecryptingReader reader(encrypted, key);
           std::size_t total = 0;
           while (const std::size_t n = reader.read(buffer)) total += n;
           loom::require(total == bytes, "crypt_bench: short decrypted read");
         }},
        repeats);
    std::filesystem::remove(plain);
    std::filesystem::remove(encrypted);
    const double gb = static_cast<double>(bytes) / 1e9;
    std::printf("  %-10s %14.2f %14.2f %8.2f %14.2f %14.2f %8.2f\n", dir.c_str(), gb / times[0], gb / times[1],
                times[1] / times[0], gb / times[2], gb / times[3], times[3] / times[2]);
    record["rows"].push_back({{"folder", dir},
                              {"plain_write_gbps", gb / times[0]},
                              {"encrypted_write_gbps", gb / times[1]},
                              {"write_ratio", times[1] / times[0]},
                              {"plain_read_gbps", gb / times[2]},
                              {"decrypted_read_gbps", gb / times[3]},
                              {"read_ratio", times[3] / times[2]}});
  }
  if (!json.empty()) loom::bench::write_json(json, record);
  return 0;
}
