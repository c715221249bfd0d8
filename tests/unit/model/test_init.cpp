// Counter-based initialisation (model/init.hpp): Philox4x32-10 against the known-answer vectors of
// its authors' Random123 library, normal deviates with the right moments, any sub-range of a
// stream equal to the same elements of the whole, and a sharded parameter space at N = 1..4 whose
// every rank makes exactly the slices of the values one process makes, bit for bit.
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <vector>

#include "loom/core/allocator.hpp"
#include "loom/core/tensor_ops.hpp"
#include "loom/model/init.hpp"
#include "loom/model/parameter_space.hpp"
#include "loom/nn/gpt.hpp"

using loom::model::philox4x32_10;

TEST_CASE("Philox4x32-10 gives Random123's known answers", "[model][init]") {
  using Block = std::array<std::uint32_t, 4>;
  CHECK(philox4x32_10({0, 0, 0, 0}, {0, 0}) == Block{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u});
  CHECK(philox4x32_10({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu}) ==
        Block{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu});
  CHECK(philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u}) ==
        Block{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u});
}

TEST_CASE("fill_normal draws N(0, std^2), and any range of a stream is those elements of the whole", "[model][init]") {
  constexpr std::int64_t n = 1 << 20;
  const loom::Tensor all = loom::Tensor::empty({n}, loom::DType::f32);
  loom::model::fill_normal(all, 7, loom::model::parameter_stream("h0.mlp.fc.weight"), 0, 2.0f);
  double sum = 0, squares = 0;
  for (const float v : all.span<float>()) {
    sum += v;
    squares += static_cast<double>(v) * v;
  }
  const double mean = sum / n, variance = squares / n - mean * mean;
  CHECK(std::fabs(mean) < 5 * 2.0 / std::sqrt(static_cast<double>(n)));
  CHECK(std::fabs(variance / 4.0 - 1.0) < 0.01);
  for (const std::int64_t first : {std::int64_t{1}, std::int64_t{2}, std::int64_t{999}, n - 7}) {
    const loom::Tensor part = loom::Tensor::empty({std::min<std::int64_t>(64, n - first)}, loom::DType::f32);
    loom::model::fill_normal(part, 7, loom::model::parameter_stream("h0.mlp.fc.weight"), first, 2.0f);
    for (std::int64_t i = 0; i < part.numel(); ++i) {
      INFO("element " << first + i);
      REQUIRE(part.span<float>()[static_cast<std::size_t>(i)] == all.span<float>()[static_cast<std::size_t>(first + i)]);
    }
  }
  // Another seed or another name is another stream.
  const loom::Tensor other = loom::Tensor::empty({4}, loom::DType::f32);
  loom::model::fill_normal(other, 8, loom::model::parameter_stream("h0.mlp.fc.weight"), 0, 2.0f);
  CHECK(other.span<float>()[0] != all.span<float>()[0]);
  loom::model::fill_normal(other, 7, loom::model::parameter_stream("h0.mlp.proj.weight"), 0, 2.0f);
  CHECK(other.span<float>()[0] != all.span<float>()[0]);
}

TEST_CASE("every rank of a sharded space makes exactly its slices of one process's values", "[model][init]") {
  const loom::nn::GPTConfig config{.vocab_size = 50, .context = 12, .layers = 3, .heads = 2, .channels = 24};
  for (const char* precision : {"fp32", "bf16"}) {
    for (int ranks : {1, 2, 3, 4}) {
      INFO(precision << ", " << ranks << " ranks");
      loom::nn::GPT whole(config, loom::nn::Precision::parse(precision), loom::Device::cpu(), 11);
      whole.parameter_space().repartition(ranks);  // the same values, laid out as the ranks see them
      const loom::model::ParameterSpace& full = whole.parameter_space();
      for (int rank = 0; rank < ranks; ++rank) {
        // Built in ZeRO-3's layout: only this rank's slices are ever allocated, and they hold the
        // bits of the whole model's.
        const loom::model::SpaceLayout layout{.ranks = ranks, .rank = rank, .values = loom::model::ValueMode::sharded,
                                              .grads = false};
        const std::int64_t live_before = loom::cpu_memory_stats().live_bytes;
        loom::reset_cpu_memory_peak();
        loom::nn::GPT built(config, loom::nn::Precision::parse(precision), loom::Device::cpu(), 11, layout);
        const loom::model::ParameterSpace& sharded = built.parameter_space();
        REQUIRE(sharded.value_mode() == loom::model::ValueMode::sharded);
        REQUIRE(sharded.value_rank() == rank);
        REQUIRE_FALSE(sharded.grads_allocated());
        REQUIRE(sharded.local_values().numel() == full.shard_elements());
        const std::int64_t shard_bytes = full.shard_elements() * static_cast<std::int64_t>(loom::dtype_size(sharded.storage()));
        CHECK(loom::cpu_memory_stats().live_bytes - live_before == shard_bytes);
        // The peak adds only initialisation's scratch, one parameter's part at a time (its f32 draw
        // and narrowed copies): a few bytes per element of the largest parameter, not a full copy.
        const std::int64_t largest = config.padded_vocab() * config.channels;
        CHECK(loom::cpu_memory_stats().peak_bytes - live_before <= shard_bytes + 12 * largest);
        for (std::size_t u = 0; u < full.units().size(); ++u) {
          INFO("rank " << rank << ", unit " << full.units()[u].name);
          REQUIRE(loom::to_doubles(sharded.unit_slice_values(u, rank)) == loom::to_doubles(full.unit_slice_values(u, rank)));
        }
        // A space sharded after it was built, initialised again.
        loom::nn::GPT model(config, loom::nn::Precision::parse(precision), loom::Device::cpu(), 99);
        loom::model::ParameterSpace& space = model.parameter_space();
        space.repartition(ranks);
        space.shard_values(rank);
        loom::fill(space.local_values(), 0.0);  // nothing left of seed 99
        space.initialize(11);
        for (std::size_t u = 0; u < full.units().size(); ++u) {
          INFO("rank " << rank << ", unit " << full.units()[u].name);
          const std::vector<double> want = loom::to_doubles(full.unit_slice_values(u, rank));
          const std::vector<double> got = loom::to_doubles(space.unit_slice_values(u, rank));
          REQUIRE(got == want);
        }
      }
    }
  }
}

TEST_CASE("a tensor-parallel box initialises to those elements of the whole tensor, bit for bit", "[model][init]") {
  using loom::model::Parameter;
  using loom::model::ParameterSpace;
  using loom::model::Partition;
  const loom::Shape global{6, 10};
  // Every parameter is named "w": the same stream, so each box must take the whole's elements.
  auto make = [](const loom::Shape& shape) {
    auto p = std::make_unique<Parameter>("w", shape, loom::DType::f32, loom::Device::cpu(), true);
    p->set_init(loom::model::Init::normal(0.02f));
    return p;
  };
  auto whole = make(global);
  ParameterSpace whole_space({{"u", {whole.get()}}});
  whole_space.initialize(5);
  const std::vector<float> all = whole->value().to_vector<float>();
  struct Box {
    loom::Shape shape;
    std::vector<std::int64_t> offset;
  };
  // Row blocks (column-parallel, and the three blocks of a fused QKV weight), uneven column blocks
  // (row-parallel), and a block in both.
  const std::vector<Box> boxes = {{{3, 10}, {3, 0}}, {{2, 10}, {4, 0}}, {{6, 4}, {0, 0}},
                                  {{6, 6}, {0, 4}},  {{2, 3}, {1, 7}}};
  for (const Box& b : boxes) {
    INFO("box " << b.shape << " at " << b.offset[0] << ", " << b.offset[1]);
    auto part = make(b.shape);
    part->set_partition(Partition{global, b.offset, false});
    ParameterSpace space({{"u", {part.get()}}});
    space.initialize(5);
    const std::vector<float> got = part->value().to_vector<float>();
    std::vector<float> want;
    for (std::int64_t r = 0; r < b.shape[0]; ++r) {
      for (std::int64_t c = 0; c < b.shape[1]; ++c) {
        want.push_back(all[static_cast<std::size_t>((r + b.offset[0]) * global[1] + c + b.offset[1])]);
      }
    }
    REQUIRE(got == want);
  }
}

TEST_CASE("a split fused weight (three stacked parts) initialises each block to the whole's rows", "[model][init]") {
  using loom::model::Parameter;
  using loom::model::Partition;
  const loom::Shape global{12, 5};  // q, k, v: 4 rows each
  auto make = [](const loom::Shape& shape) {
    auto p = std::make_unique<Parameter>("qkv", shape, loom::DType::f32, loom::Device::cpu(), true);
    p->set_init(loom::model::Init::normal(0.02f));
    return p;
  };
  auto whole = make(global);
  loom::model::ParameterSpace whole_space({{"u", {whole.get()}}});
  whole_space.initialize(9);
  const std::vector<float> all = whole->value().to_vector<float>();
  for (const std::int64_t rank : {0, 1}) {
    INFO("tensor rank " << rank << " of 2");
    auto part = make(loom::Shape{6, 5});
    part->set_partition(Partition{global, {2 * rank, 0}, false, 3});
    loom::model::ParameterSpace space({{"u", {part.get()}}});
    space.initialize(9);
    std::vector<float> want;
    for (const std::int64_t stacked : {0, 4, 8}) {  // rows [2 rank, 2 rank + 2) of q, of k, of v
      for (std::int64_t r = 2 * rank; r < 2 * rank + 2; ++r) {
        for (std::int64_t c = 0; c < 5; ++c) want.push_back(all[static_cast<std::size_t>((stacked + r) * 5 + c)]);
      }
    }
    REQUIRE(part->value().to_vector<float>() == want);
  }
  // A box that would leave its part, and a stack the rows do not divide into, are named.
  auto bad = make(loom::Shape{6, 5});
  CHECK_THROWS_WITH(bad->set_partition(Partition{global, {3, 0}, false, 3}), Catch::Contains("does not fit") &&
                                                                                  Catch::Contains("3 stacked parts"));
  CHECK_THROWS_WITH(bad->set_partition(Partition{global, {0, 0}, false, 4}), Catch::Contains("a stack of 4"));
}
