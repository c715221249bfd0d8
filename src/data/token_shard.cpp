#include "loom/data/token_shard.hpp"

#include <array>
#include <cstdio>
#include <filesystem>
#include <cstring>
#include <fstream>
#include <iterator>

#include "loom/core/error.hpp"
#include "loom/crypt/encrypted_file.hpp"
#include "loom/io/at_rest.hpp"

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
  // One open judges and reads it; an encrypted shard (io/at_rest.hpp) is decrypted and verified
  // whole first.
  io::PlaintextReader file(path);
  if (!file.encrypted()) io::require_plain_allowed(path, "token shard");
  return parse_token_shard(file.read_all(), path);
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
  out.close();  // a full disk may only show when the buffer is flushed
  if (!out) fail(ErrorCategory::io, "cannot write token shard '", path, "'");
}

TokenShardWriter::TokenShardWriter(std::string prefix, std::int64_t shard_tokens)
    : prefix_(std::move(prefix)), shard_tokens_(shard_tokens) {
  require(shard_tokens >= 1 && shard_tokens <= 0x7fffffff, "token shards: ", shard_tokens,
          " tokens per shard do not fit the header (1 to 2^31 - 1)");
  const std::filesystem::path folder = std::filesystem::path(prefix_).parent_path();
  std::error_code error;
  if (!folder.empty()) std::filesystem::create_directories(folder, error);
  if (error) fail(ErrorCategory::io, "cannot create the shards' folder '", folder.string(), "': ", error.message());
}

TokenShardWriter::~TokenShardWriter() = default;

void TokenShardWriter::add(const std::vector<std::int32_t>& tokens) {
  for (const std::int32_t token : tokens) {
    require(token >= 0 && token < 65536, "token shards: token ", token, " does not fit llm.c's uint16 tokens");
    buffer_.push_back(static_cast<std::uint16_t>(token));
    if (static_cast<std::int64_t>(buffer_.size()) == shard_tokens_) close_shard();
  }
  total_ += static_cast<std::int64_t>(tokens.size());
}

void TokenShardWriter::close_shard() {
  char number[16];
  std::snprintf(number, sizeof number, "_%06zu.bin", written_.size());
  const std::string path = prefix_ + number, temporary = path + ".tmp";
  std::error_code error;
  try {
    write_token_shard(temporary, buffer_);
  } catch (const Error&) {
    std::filesystem::remove(temporary, error);  // a part written is no shard
    throw;
  }
  std::filesystem::rename(temporary, path, error);
  if (error) fail(ErrorCategory::io, "cannot rename '", temporary, "' to '", path, "': ", error.message());
  written_.push_back(path);
  buffer_.clear();
}

std::vector<std::string> TokenShardWriter::finish() {
  if (!buffer_.empty()) close_shard();
  return written_;
}

}  // namespace loom::data
