// Streaming llm.c token shards: every shard is mapped read-only and its uint16 tokens are read
// where they lie, widened to int32 only as a batch is built. A corpus of any size costs address
// space, not memory. Once a row is copied, its pages and the 2 MiB blocks around them are dropped
// from the mapping (madvise), so the process's resident memory stays at a few batches. The page
// cache keeps the pages for the next reader and the next epoch.
//
// The set is split into windows of T + 1 tokens at a stride of T, inside each shard (a window
// never spans two shards, as in llm.c's loader). Windows are numbered across the shards in file
// order, and a source reads a range of them, so the tail can be held out for evaluation. Row b of
// global batch g is stream position q = g B + b. That is window (q mod W) of epoch q / W in the
// epoch's order. In order `sequential` the order is the windows' own. In order `shuffled`, each
// epoch first permutes the pieces (one per shard) and then the windows inside each piece. Both
// permutations are keyed by (seed, epoch) and need no memory (shuffled_index, dataset.hpp). A
// rank still reads one shard at a time, whose pages the page cache then holds together; inside
// it the windows come in random order (a cold disk serves them as random reads: data_bench
// measures that case). Ranks take interleaved whole global batches (rank r: r, r + N, ...), like
// TokenBatches: the stream is the same at any number of ranks, and a checkpoint resumes where the
// job's count divides over the new ranks. Sequential order over one shard gives exactly
// TokenBatches' batches.
//
// Encrypted shards (loom-crypt encrypt, io/at_rest.hpp's key) cannot be read where they lie (each
// chunk is chained to the one before): a source decrypts the shard it is reading whole, in its
// own thread (the Prefetcher's), verified chunk by chunk, and holds that one plaintext until it
// moves on to another shard. Memory is then one shard per source, not a few batches.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "loom/data/batch_source.hpp"

namespace loom::data {

// A shard's tokens while a reader holds them: a mapped shard's pages, or an encrypted shard's
// plaintext (kept alive by `hold`).
struct ShardTokens {
  std::span<const std::uint16_t> tokens;
  std::shared_ptr<const std::vector<std::uint16_t>> hold;  // an encrypted shard's plaintext; null: mapped
};

// One shard mapped read-only, or an encrypted one (loom's format, under the process's key:
// io/at_rest.hpp). Opening validates the header (magic, version, declared count against the
// file's size; an encrypted shard's first chunk is decrypted for it): an io Error for a file that
// cannot be opened or mapped, invalid_argument for a missing or wrong key, corrupt_data naming the
// file and the fault otherwise.
class MappedShard {
 public:
  explicit MappedShard(const std::string& path);
  ~MappedShard();
  MappedShard(const MappedShard&) = delete;
  MappedShard& operator=(const MappedShard&) = delete;

  const std::string& path() const noexcept { return path_; }
  std::int64_t size() const noexcept { return count_; }  // tokens
  bool encrypted() const noexcept { return encrypted_; }
  // The tokens: a mapped shard's at once; an encrypted shard's decrypted whole on the first call
  // (corrupt_data Error naming the file and chunk when one fails), shared while anyone holds them,
  // and decrypted again after they were let go. Thread-safe.
  ShardTokens tokens() const;
  // Drops the 2 MiB blocks that hold tokens [begin, end) from this process's resident set (the
  // page cache keeps them; a later read faults them back in). A hint: it never fails.
  void release(std::int64_t begin, std::int64_t end) const noexcept;

 private:
  std::string path_;
  void* map_ = nullptr;
  std::size_t map_bytes_ = 0;
  const std::uint16_t* tokens_ = nullptr;
  std::int64_t count_ = 0;
  bool encrypted_ = false;
  mutable std::mutex decrypting_;
  mutable std::weak_ptr<const std::vector<std::uint16_t>> plaintext_;
};

// The files a `shards:` spec names: comma-separated paths or glob patterns, each pattern's matches
// sorted. Each pattern must match at least one file (an invalid_argument Error naming the
// pattern otherwise), and a file named twice is an error.
std::vector<std::string> expand_shard_paths(const std::string& spec);

// The mapped shards of a set, in the order given.
class ShardSet {
 public:
  explicit ShardSet(const std::vector<std::string>& paths);
  std::size_t shards() const noexcept { return shards_.size(); }
  const MappedShard& shard(std::size_t i) const { return *shards_[i]; }
  std::int64_t tokens() const noexcept;
  // Windows of `steps` + 1 tokens at a stride of `steps` in shard i, and in the whole set.
  std::int64_t windows(std::size_t i, std::int64_t steps) const;
  std::int64_t windows(std::int64_t steps) const;

 private:
  std::vector<std::unique_ptr<MappedShard>> shards_;
};

enum class WindowOrder { sequential, shuffled };

struct ShardBatchesOptions {
  std::int64_t batch = 1;   // rows per rank per batch
  std::int64_t steps = 1;   // tokens per row (the sequence length T)
  std::int64_t vocab_size = 50257;
  WindowOrder order = WindowOrder::shuffled;
  std::uint64_t seed = 0;   // the shuffle's
  // The set's windows this source reads, [first_window, last_window), numbered across the shards
  // in file order; last_window -1: to the end.
  std::int64_t first_window = 0, last_window = -1;
};

class ShardBatches final : public BatchSource {
 public:
  // The set must outlive the source. A window range that is empty or past the set is an
  // invalid_argument Error; a token outside the vocabulary fails the batch that reads it
  // (corrupt_data, naming the shard and the token's position).
  ShardBatches(const ShardSet& set, ShardBatchesOptions options, Partition partition = {});

  Batch next() override;
  std::int64_t position() const override { return position_; }
  void seek(std::int64_t position) override;
  std::int64_t vocab_size() const override { return options_.vocab_size; }
  std::int64_t windows() const noexcept { return windows_; }
  // Where stream position q's window lies: shard and first token.
  struct Place {
    std::size_t shard;
    std::int64_t token;
  };
  Place place(std::int64_t q) const;

 private:
  struct Piece {  // a shard's windows in this source's range
    std::size_t shard;
    std::int64_t first, count;  // in the shard's own window numbering
  };
  const ShardSet& set_;
  ShardBatchesOptions options_;
  Partition partition_;
  std::vector<Piece> pieces_;
  std::int64_t windows_ = 0;
  std::int64_t position_ = 0;
  // The epoch whose piece order is cached: the pieces in order, and where each begins in it.
  mutable std::int64_t cached_epoch_ = -1;
  mutable std::vector<std::size_t> order_;
  mutable std::vector<std::int64_t> starts_;
  // The shard being read (an encrypted one's plaintext is held until the source moves on).
  ShardTokens held_;
  std::size_t held_shard_ = static_cast<std::size_t>(-1);
};

}  // namespace loom::data
