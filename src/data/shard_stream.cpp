#include "loom/data/shard_stream.hpp"

#include <fcntl.h>
#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <string_view>

#include "loom/core/error.hpp"
#include "loom/crypt/encrypted_file.hpp"
#include "loom/data/dataset.hpp"
#include "loom/io/at_rest.hpp"
#include "loom/data/token_shard.hpp"
#include "src/core/owned_output.hpp"
#include "src/core/unique_fd.hpp"

namespace loom::data {

namespace {

// A piece's key for its windows' permutation: the same shard draws another order than its neighbours.
std::uint64_t piece_seed(std::uint64_t seed, std::size_t shard) {
  std::uint64_t x = seed ^ (0x9e3779b97f4a7c15ull * (shard + 1));
  x ^= x >> 31;
  x *= 0xbf58476d1ce4e5b9ull;
  return x ^ (x >> 29);
}

}  // namespace

namespace {

// An encrypted shard's reader under the process's key: an invalid_argument Error naming the key
// the file needs when there is none or another.
crypt::DecryptingReader open_encrypted(const std::string& path) {
  io::require_key_for(path);
  const std::shared_ptr<const crypt::SecretKey> key = io::at_rest_key();
  // (require_key_for passes a header it cannot read: without a key, say which file needs one.)
  require(key != nullptr, "token shard '", path, "' is encrypted; give its key with --key-file or LOOM_KEY_FILE");
  return crypt::DecryptingReader(path, *key);
}

// Exactly `bytes` of verified plaintext; a stream that ends first is a corrupt_data Error (the
// reader ends only at a verified final chunk, so this is a shard shorter than it says).
void read_exactly(crypt::DecryptingReader& reader, void* out, std::size_t bytes, const std::string& path) {
  auto* at = static_cast<unsigned char*>(out);
  for (std::size_t got = 0; got < bytes;) {
    const std::size_t n = reader.read({at + got, bytes - got});
    if (n == 0) {
      fail(ErrorCategory::corrupt_data, "token shard '", path, "' ends after ", got, " of the ", bytes,
           " bytes read from it (cut short)");
    }
    got += n;
  }
}

}  // namespace

MappedShard::MappedShard(const std::string& path) : path_(path) {
  // One open judges the shard and reads it (no second open by name to swap a file in between).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // a FIFO: refused below, not waited on
  if (fd < 0) fail(ErrorCategory::io, "cannot open token shard '", path, "': ", std::strerror(errno));
  const loom::detail::Fd owned(fd);
  struct stat info {};
  if (::fstat(fd, &info) != 0) fail(ErrorCategory::io, "cannot stat token shard '", path, "': ", std::strerror(errno));
  if (!S_ISREG(info.st_mode)) fail(ErrorCategory::invalid_argument, "token shard '", path, "' is not a regular file");
  loom::detail::clear_nonblocking(fd);
  if (crypt::is_encrypted_descriptor(fd)) {
    // The header is in the first chunk: decrypting that one checks the key and the header now.
    encrypted_ = true;
    io::require_key_for(path);
    const std::shared_ptr<const crypt::SecretKey> key = io::at_rest_key();
    require(key != nullptr, "token shard '", path, "' is encrypted; give its key with --key-file or LOOM_KEY_FILE");
    crypt::DecryptingReader reader(fd, *key, path);
    std::string header(token_shard_header_bytes, '\0');
    read_exactly(reader, header.data(), header.size(), path_);
    count_ = check_token_shard(header, static_cast<std::int64_t>(reader.info().plaintext_bytes), path);
    return;
  }
  io::require_plain_allowed(path, "token shard");
  const auto file_bytes = static_cast<std::int64_t>(info.st_size);
  if (file_bytes > 0) {
    map_ = ::mmap(nullptr, static_cast<std::size_t>(file_bytes), PROT_READ, MAP_SHARED, fd, 0);
  }
  const int error = errno;  // (the mapping keeps the file when the descriptor closes)
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    fail(ErrorCategory::io, "cannot map token shard '", path, "': ", std::strerror(error));
  }
  map_bytes_ = static_cast<std::size_t>(file_bytes);
  try {
    const std::string_view bytes(static_cast<const char*>(map_), map_ != nullptr ? map_bytes_ : 0);
    count_ = check_token_shard(bytes, file_bytes, path);
  } catch (...) {
    if (map_ != nullptr) ::munmap(map_, map_bytes_);
    throw;
  }
  tokens_ = reinterpret_cast<const std::uint16_t*>(static_cast<const char*>(map_) + token_shard_header_bytes);
  // Windows are read in a shuffled order: read-ahead beyond one would be wasted.
  ::madvise(map_, map_bytes_, MADV_RANDOM);
}

MappedShard::~MappedShard() {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
}

ShardTokens MappedShard::tokens() const {
  if (!encrypted_) return {{tokens_, static_cast<std::size_t>(count_)}, nullptr};
  const std::lock_guard lock(decrypting_);
  std::shared_ptr<const std::vector<std::uint16_t>> plain = plaintext_.lock();
  if (!plain) {
    crypt::DecryptingReader reader = open_encrypted(path_);
    std::string header(token_shard_header_bytes, '\0');
    read_exactly(reader, header.data(), header.size(), path_);
    require(check_token_shard(header, static_cast<std::int64_t>(reader.info().plaintext_bytes), path_) == count_,
            ErrorCategory::corrupt_data, "token shard '", path_, "' changed since it was opened");
    auto tokens = std::make_shared<std::vector<std::uint16_t>>(static_cast<std::size_t>(count_));
    read_exactly(reader, tokens->data(), tokens->size() * 2, path_);
    // The final chunk, verified: a shard cut short or extended fails here, never trains.
    unsigned char beyond = 0;
    require(reader.read({&beyond, 1}) == 0, ErrorCategory::corrupt_data, "token shard '", path_,
            "' holds more than its header's ", count_, " tokens");
    plain = std::move(tokens);
    plaintext_ = plain;
  }
  return {{plain->data(), plain->size()}, plain};
}

void MappedShard::release(std::int64_t begin, std::int64_t end) const noexcept {
  if (encrypted_) return;  // a plaintext in memory is let go whole (ShardTokens)
  // The whole 2 MiB blocks around the range, not just its pages: a fault maps the pages around it
  // that the page cache holds too (the kernel's fault-around, 64 KiB by default; a huge page of
  // page cache maps 2 MiB at once), and those would stay resident (a 2 GiB stream kept 240 MiB
  // when only the window's pages were dropped). A neighbour read later faults its page back in
  // from the page cache: a minor fault, no I/O.
  constexpr std::int64_t block = std::int64_t{2} << 20;
  const std::int64_t from = static_cast<std::int64_t>(token_shard_header_bytes) + 2 * begin;
  const std::int64_t to = static_cast<std::int64_t>(token_shard_header_bytes) + 2 * end;
  const std::int64_t first = from / block * block;
  const std::int64_t last = std::min<std::int64_t>((to + block - 1) / block * block, static_cast<std::int64_t>(map_bytes_));
  if (last > first) ::madvise(static_cast<char*>(map_) + first, static_cast<std::size_t>(last - first), MADV_DONTNEED);
}

std::vector<std::string> expand_shard_paths(const std::string& spec) {
  std::vector<std::string> paths;
  std::set<std::string> seen;
  std::size_t from = 0;
  for (;;) {
    const std::size_t comma = spec.find(',', from);
    const std::string pattern = spec.substr(from, comma == std::string::npos ? std::string::npos : comma - from);
    require(!pattern.empty(), "token shards '", spec, "': an empty entry (two commas, or one at an end)");
    glob_t found{};
    const int status = ::glob(pattern.c_str(), GLOB_ERR, nullptr, &found);
    std::vector<std::string> matches(found.gl_pathv, found.gl_pathv + (status == 0 ? found.gl_pathc : 0));
    ::globfree(&found);
    require(status == 0 && !matches.empty(), "token shards: '", pattern, "' matches no file",
            status == GLOB_ABORTED ? " (a directory could not be read)" : "");
    for (std::string& path : matches) {
      require(seen.insert(path).second, "token shards: '", path, "' is named twice in '", spec, "'");
      paths.push_back(std::move(path));
    }
    if (comma == std::string::npos) return paths;
    from = comma + 1;
  }
}

ShardSet::ShardSet(const std::vector<std::string>& paths) {
  require(!paths.empty(), "token shards: no shard given");
  for (const std::string& path : paths) shards_.push_back(std::make_unique<MappedShard>(path));
}

std::int64_t ShardSet::tokens() const noexcept {
  std::int64_t n = 0;
  for (const auto& s : shards_) n += s->size();
  return n;
}

std::int64_t ShardSet::windows(std::size_t i, std::int64_t steps) const {
  require(steps >= 1, "token shards: the sequence length must be positive, got ", steps);
  return std::max<std::int64_t>(0, (shards_.at(i)->size() - 1) / steps);
}

std::int64_t ShardSet::windows(std::int64_t steps) const {
  std::int64_t n = 0;
  for (std::size_t i = 0; i < shards_.size(); ++i) n += windows(i, steps);
  return n;
}

ShardBatches::ShardBatches(const ShardSet& set, ShardBatchesOptions options, Partition partition)
    : set_(set), options_(options), partition_(partition) {
  partition.validate();
  require(options.batch >= 1 && options.steps >= 1, "token shards: batch and sequence length must be positive, got ",
          options.batch, " and ", options.steps);
  require(options.vocab_size >= 1 && options.vocab_size <= 65536, "token shards: a vocabulary of ",
          options.vocab_size, " does not fit uint16 tokens");
  const std::int64_t total = set.windows(options.steps);
  const std::int64_t last = options.last_window < 0 ? total : options.last_window;
  require(options.first_window >= 0 && options.first_window < last && last <= total, "token shards: windows [",
          options.first_window, ", ", last, ") are not a range of the set's ", total, " windows of ",
          options.steps + 1, " tokens (", set.tokens(), " tokens in ", set.shards(), " shards)");
  std::int64_t begin = 0;  // the shard's first window in the set's numbering
  for (std::size_t i = 0; i < set.shards(); ++i) {
    const std::int64_t n = set.windows(i, options.steps);
    const std::int64_t from = std::max(begin, options.first_window), to = std::min(begin + n, last);
    if (to > from) pieces_.push_back({i, from - begin, to - from});
    begin += n;
  }
  windows_ = last - options.first_window;
}

void ShardBatches::seek(std::int64_t position) {
  require(position >= 0, "token shards: position must be >= 0, got ", position);
  position_ = position;
}

ShardBatches::Place ShardBatches::place(std::int64_t q) const {
  const std::int64_t epoch = q / windows_, k = q % windows_;
  const bool shuffled = options_.order == WindowOrder::shuffled;
  if (epoch != cached_epoch_) {
    const auto n = static_cast<std::int64_t>(pieces_.size());
    order_.resize(pieces_.size());
    starts_.resize(pieces_.size());
    std::int64_t start = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t piece = shuffled ? shuffled_index(i, n, options_.seed, static_cast<std::uint64_t>(epoch)) : i;
      order_[static_cast<std::size_t>(i)] = static_cast<std::size_t>(piece);
      starts_[static_cast<std::size_t>(i)] = start;
      start += pieces_[static_cast<std::size_t>(piece)].count;
    }
    cached_epoch_ = epoch;
  }
  const auto at = static_cast<std::size_t>(std::upper_bound(starts_.begin(), starts_.end(), k) - starts_.begin() - 1);
  const Piece& piece = pieces_[order_[at]];
  const std::int64_t j = k - starts_[at];
  const std::int64_t window =
      shuffled ? shuffled_index(j, piece.count, piece_seed(options_.seed, piece.shard), static_cast<std::uint64_t>(epoch))
               : j;
  return {piece.shard, (piece.first + window) * options_.steps};
}

Batch ShardBatches::next() {
  const std::int64_t B = options_.batch, T = options_.steps;
  Batch out{Tensor::empty({B, T}, DType::i32), Tensor::empty({B, T}, DType::i32)};
  const std::int64_t global = position_ * partition_.world + partition_.rank;
  for (std::int64_t b = 0; b < B; ++b) {
    const Place at = place(global * B + b);
    const MappedShard& shard = set_.shard(at.shard);
    if (at.shard != held_shard_) {
      held_shard_ = static_cast<std::size_t>(-1);  // nothing held, should decrypting fail
      held_ = ShardTokens{};  // the previous shard's plaintext goes before the next is decrypted
      held_ = shard.tokens();
      held_shard_ = at.shard;
    }
    const std::uint16_t* window = held_.tokens.data() + at.token;
    std::int32_t* tokens = out.inputs.data<std::int32_t>() + b * T;
    std::int32_t* targets = out.targets.data<std::int32_t>() + b * T;
    for (std::int64_t t = 0; t <= T; ++t) {
      const std::int32_t token = window[t];
      if (token >= options_.vocab_size) {
        fail(ErrorCategory::corrupt_data, "token shard '", shard.path(), "': token ", token, " at position ",
             at.token + t, " is outside the vocabulary [0, ", options_.vocab_size, ")",
             options_.vocab_size == 256 ? " (GPT-2 token shards need a vocabulary of 50257: --vocab 50257)" : "");
      }
      if (t < T) tokens[t] = token;
      if (t > 0) targets[t - 1] = token;
    }
    shard.release(at.token, at.token + T + 1);
  }
  ++position_;
  return out;
}

}  // namespace loom::data
