#include "loom/data/token_shard.hpp"

#include <array>
#include <cstring>
#include <fstream>
#include <iterator>

#include "loom/core/error.hpp"

namespace loom::data {

namespace {
constexpr std::size_t header_ints = 256;
}

std::int64_t check_token_shard(std::string_view bytes, std::int64_t file_bytes, const std::string& name) {
  std::array<std::int32_t, header_ints> header{};
  static_assert(sizeof(header) == token_shard_header_bytes);
  if (file_bytes < static_cast<std::int64_t>(sizeof(header)) || bytes.size() < sizeof(header)) {
    fail(ErrorCategory::corrupt_data, "token shard '", name, "' is shorter (", file_bytes,
         " bytes) than its 1024-byte header");
  }
  std::memcpy(header.data(), bytes.data(), sizeof(header));
  if (header[0] != token_shard_magic) {
    fail(ErrorCategory::corrupt_data, "token shard '", name, "' has magic ", header[0], ", expected ",
         token_shard_magic, " (not an llm.c token shard)");
  }
  if (header[1] != token_shard_version) {
    fail(ErrorCategory::corrupt_data, "token shard '", name, "' has version ", header[1], ", expected ",
         token_shard_version);
  }
  const std::int64_t count = header[2];
  const std::int64_t expected = static_cast<std::int64_t>(sizeof(header)) + count * 2;
  if (count < 0 || file_bytes != expected) {
    fail(ErrorCategory::corrupt_data, "token shard '", name, "' declares ", count, " tokens (", expected,
         " bytes) but holds ", file_bytes, " bytes", file_bytes < expected ? " (truncated)" : "");
  }
  return count;
}

std::vector<std::uint16_t> parse_token_shard(std::string_view bytes, const std::string& name) {
  const std::int64_t count = check_token_shard(bytes, static_cast<std::int64_t>(bytes.size()), name);
  std::vector<std::uint16_t> tokens(static_cast<std::size_t>(count));
  if (!tokens.empty()) std::memcpy(tokens.data(), bytes.data() + token_shard_header_bytes, tokens.size() * 2);
  return tokens;
}

std::vector<std::uint16_t> read_token_shard(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorCategory::io, "cannot open token shard '", path, "'");
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) fail(ErrorCategory::io, "cannot read token shard '", path, "'");
  return parse_token_shard(bytes, path);
}

void write_token_shard(const std::string& path, const std::vector<std::uint16_t>& tokens) {
  std::array<std::int32_t, header_ints> header{};
  header[0] = token_shard_magic;
  header[1] = token_shard_version;
  require(tokens.size() <= 0x7fffffffu, "token shard '", path, "': ", tokens.size(), " tokens do not fit the header");
  header[2] = static_cast<std::int32_t>(tokens.size());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail(ErrorCategory::io, "cannot create token shard '", path, "'");
  out.write(reinterpret_cast<const char*>(header.data()), sizeof(header));
  out.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
  if (!out) fail(ErrorCategory::io, "cannot write token shard '", path, "'");
}

}  // namespace loom::data
