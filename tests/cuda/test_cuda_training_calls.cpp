// After warm-up, a GPT training step on the GPU (forward, backward, clipping, AdamW) makes no
// device allocation or free and creates no cuBLASLt handle and runs no algorithm search: the
// buffers, workspaces, handles and chosen algorithms are all kept between steps.
#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "loom/core/device_calls.hpp"
#include "loom/data/token_batches.hpp"
#include "loom/nn/gpt.hpp"
#include "loom/train/trainer.hpp"

TEST_CASE("GPU training steps after warm-up make no device allocation and no cuBLASLt setup",
          "[cuda][train][calls]") {
  loom::nn::GPTConfig config;
  config.vocab_size = 500;
  config.context = 64;
  config.layers = 2;
  config.heads = 4;
  config.channels = 128;
  for (loom::nn::AttentionKernel attention : {loom::nn::AttentionKernel::fused, loom::nn::AttentionKernel::stored}) {
    INFO("attention " << loom::nn::to_string(attention));
    config.attention = attention;
    loom::nn::GPT model(config, loom::nn::Precision::bf16(), loom::Device::cuda(0));
    std::mt19937 rng(5);
    std::vector<std::int32_t> tokens(4096);
    for (auto& t : tokens) t = static_cast<std::int32_t>(rng() % config.vocab_size);
    loom::data::TokenBatches data(tokens, config.vocab_size, 4, config.context);
    loom::train::TrainerOptions options;
    options.schedule = {.max_lr = 1e-3f, .min_lr = 1e-4f, .warmup = 0, .total = 10};
    loom::train::Trainer trainer(model, data, options);
    for (int i = 0; i < 2; ++i) trainer.step();  // warm-up: buffers, handles, algorithms
    const loom::DeviceCallCounts before = loom::device_call_counts();
    float loss = 0;
    for (int i = 0; i < 3; ++i) loss = trainer.step().loss;
    const loom::DeviceCallCounts after = loom::device_call_counts();
    REQUIRE(std::isfinite(loss));
    CHECK(after.device_allocations == before.device_allocations);
    CHECK(after.device_frees == before.device_frees);
    CHECK(after.blas_handles == before.blas_handles);
    CHECK(after.blas_algorithm_searches == before.blas_algorithm_searches);
    CHECK(after.attribute_queries == before.attribute_queries);
  }
}
