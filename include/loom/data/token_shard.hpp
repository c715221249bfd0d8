// The token shard format of llm.c, so that shards prepared by that ecosystem (e.g. its
// FineWeb/TinyShakespeare scripts) train here unchanged: a header of 256 little-endian int32
// (magic 20240520, version 1, token count, the rest zero) followed by the tokens as uint16.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace loom::data {

inline constexpr std::int32_t token_shard_magic = 20240520;
inline constexpr std::int32_t token_shard_version = 1;

inline constexpr std::size_t token_shard_header_bytes = 1024;

// Checks a shard's header against the file's size and returns its token count: a corrupt_data
// Error naming the file and what was wrong (short file, magic, version, a count the size
// contradicts). `bytes` holds at least the header when the file does.
std::int64_t check_token_shard(std::string_view bytes, std::int64_t file_bytes, const std::string& name);
// Reads a whole shard; a missing file is an io Error, a bad magic/version, a truncated or
// oversized file a corrupt_data Error naming the file and what was wrong.
std::vector<std::uint16_t> read_token_shard(const std::string& path);
// The same from a shard's bytes (name is used in errors).
std::vector<std::uint16_t> parse_token_shard(std::string_view bytes, const std::string& name);
// Writes a shard (for tools and tests); io Error on failure.
void write_token_shard(const std::string& path, const std::vector<std::uint16_t>& tokens);

// Writes a token stream as numbered shards of at most `shard_tokens` tokens each (the prefix's
// folder is created):
// `PREFIX_000000.bin`, `PREFIX_000001.bin`, ... A shard's tokens are held in memory, then written
// as PREFIX_n.bin.tmp (removed again when the write fails) and renamed once whole, so a crash never
// leaves a shard that reads as complete. Tokens must fit
// uint16 (llm.c's format; an invalid_argument Error naming the token otherwise).
class TokenShardWriter {
 public:
  TokenShardWriter(std::string prefix, std::int64_t shard_tokens);
  ~TokenShardWriter();  // tokens not yet in a finished shard are dropped (they are held in memory)
  TokenShardWriter(const TokenShardWriter&) = delete;
  TokenShardWriter& operator=(const TokenShardWriter&) = delete;

  void add(const std::vector<std::int32_t>& tokens);
  // Completes the last shard; returns every shard's path.
  std::vector<std::string> finish();
  std::int64_t tokens() const noexcept { return total_; }

 private:
  void close_shard();
  std::string prefix_;
  std::int64_t shard_tokens_;
  std::vector<std::uint16_t> buffer_;  // the current shard's tokens
  std::vector<std::string> written_;
  std::int64_t total_ = 0;
};

}  // namespace loom::data
