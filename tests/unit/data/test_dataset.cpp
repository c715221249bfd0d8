// data::Dataset and data::DatasetBatches: the keyed shuffle is a permutation every epoch; N ranks'
// slices of each global batch are exactly one process's global batch, in order, across epochs;
// the position a checkpoint stores resumes at another number of ranks; and a dataset that returns
// the wrong rows is named.
#include <catch2/catch.hpp>

#include <algorithm>
#include <memory>
#include <numeric>
#include <set>
#include <vector>

#include "loom/core/error.hpp"
#include "loom/data/dataset.hpp"
#include "loom/data/prefetcher.hpp"

using loom::DType;
using loom::Tensor;
namespace data = loom::data;

namespace {

// Example i: inputs (i, i + 0.5) f32, target i as a class index; `rows_off` returns one row too few.
class Numbers final : public data::Dataset {
 public:
  explicit Numbers(std::int64_t size, bool rows_off = false) : size_(size), rows_off_(rows_off) {}
  std::int64_t size() const override { return size_; }
  data::Batch examples(std::span<const std::int64_t> indices) const override {
    const std::int64_t n = static_cast<std::int64_t>(indices.size()) - (rows_off_ ? 1 : 0);
    Tensor x = Tensor::empty({n, 2}, DType::f32), y = Tensor::empty({n}, DType::i32);
    for (std::int64_t r = 0; r < n; ++r) {
      x.data<float>()[2 * r] = static_cast<float>(indices[static_cast<std::size_t>(r)]);
      x.data<float>()[2 * r + 1] = static_cast<float>(indices[static_cast<std::size_t>(r)]) + 0.5f;
      y.data<std::int32_t>()[r] = static_cast<std::int32_t>(indices[static_cast<std::size_t>(r)]);
    }
    return {x, y};
  }

 private:
  std::int64_t size_;
  bool rows_off_;
};

std::vector<std::int32_t> ids(const data::Batch& b) { return b.targets.to_vector<std::int32_t>(); }

}  // namespace

TEST_CASE("the keyed shuffle visits every index once, with another order each epoch and seed", "[data][dataset]") {
  for (const std::int64_t n : {1, 2, 3, 7, 16, 17, 100, 257, 1000, 4099}) {
    std::vector<std::int64_t> seen;
    for (std::int64_t k = 0; k < n; ++k) seen.push_back(data::shuffled_index(k, n, 5, 0));
    std::vector<std::int64_t> sorted = seen;
    std::sort(sorted.begin(), sorted.end());
    std::vector<std::int64_t> all(static_cast<std::size_t>(n));
    std::iota(all.begin(), all.end(), 0);
    REQUIRE(sorted == all);
    if (n >= 16) {
      std::vector<std::int64_t> next_epoch, other_seed;
      for (std::int64_t k = 0; k < n; ++k) {
        next_epoch.push_back(data::shuffled_index(k, n, 5, 1));
        other_seed.push_back(data::shuffled_index(k, n, 6, 0));
      }
      CHECK(next_epoch != seen);
      CHECK(other_seed != seen);
      CHECK(seen != all);
    }
  }
  CHECK_THROWS_WITH(data::shuffled_index(5, 5, 0, 0), Catch::Contains("index 5 is outside [0, 5)"));
}

TEST_CASE("N ranks' slices of each global batch are one process's global batch, across epochs", "[data][dataset]") {
  const Numbers dataset(10);  // global batches of 6 straddle the epochs of 10
  for (const bool shuffle : {false, true}) {
    const data::DatasetOrder order{shuffle, 3};
    data::DatasetBatches single(dataset, 6, {0, 1}, order);
    std::vector<std::unique_ptr<data::DatasetBatches>> ranks;
    for (int r = 0; r < 3; ++r) ranks.push_back(std::make_unique<data::DatasetBatches>(dataset, 6, data::Partition{r, 3}, order));
    std::multiset<std::int32_t> first_epoch;
    for (int g = 0; g < 5; ++g) {
      const data::Batch whole = single.next();
      REQUIRE(whole.inputs.shape() == loom::Shape{6, 2});
      std::vector<std::int32_t> joined;
      for (auto& rank : ranks) {
        const data::Batch part = rank->next();
        REQUIRE(part.inputs.shape() == loom::Shape{2, 2});
        for (const std::int32_t id : ids(part)) joined.push_back(id);
      }
      REQUIRE(joined == ids(whole));
      for (const std::int32_t id : ids(whole)) {
        if (first_epoch.size() < 10) first_epoch.insert(id);
      }
    }
    // The first 10 examples of the stream are the first epoch: each example once.
    CHECK(first_epoch == std::multiset<std::int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
    CHECK((single.example_at(3) == 3) == !shuffle);
  }
}

TEST_CASE("a dataset position resumes at another number of ranks", "[data][dataset]") {
  const Numbers dataset(50);
  data::DatasetBatches two(dataset, 12, {1, 2}, {true, 9});
  for (int i = 0; i < 3; ++i) two.next();
  const std::int64_t consumed = two.consumed_at(two.position(), 2);
  CHECK(consumed == 3);  // global batches, the same on every rank
  data::DatasetBatches three(dataset, 12, {0, 3}, {true, 9});
  three.seek(three.position_at(consumed, 3));
  data::DatasetBatches single(dataset, 12, {0, 1}, {true, 9});
  single.seek(3);
  const std::vector<std::int32_t> whole = ids(single.next()), part = ids(three.next());
  REQUIRE(part == std::vector<std::int32_t>(whole.begin(), whole.begin() + 4));
  // Through a prefetcher the position means the same.
  data::Prefetcher prefetched(std::make_unique<data::DatasetBatches>(dataset, 12, data::Partition{0, 3},
                                                                     data::DatasetOrder{true, 9}));
  prefetched.seek(prefetched.position_at(consumed, 3));
  CHECK(ids(prefetched.next()) == part);
  CHECK(prefetched.consumed_at(prefetched.position(), 3) == 4);
}

TEST_CASE("dataset batches name a global batch that does not divide and a dataset's wrong rows", "[data][dataset]") {
  const Numbers dataset(8), short_rows(8, true), empty(0);
  CHECK_THROWS_WITH(data::DatasetBatches(dataset, 7, {0, 2}), Catch::Contains("global batch of 7 rows must be positive and divide over the 2 ranks"));
  CHECK_THROWS_WITH(data::DatasetBatches(empty, 4), Catch::Contains("the dataset is empty"));
  data::DatasetBatches bad(short_rows, 4);
  CHECK_THROWS_WITH(bad.next(), Catch::Contains("asked for 4 examples and returned inputs Tensor(f32, (3, 2), cpu)"));
}
