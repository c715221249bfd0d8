// gpt_fingerprint: trains a small GPT for a few steps on fixed random tokens and prints one line,
// a 64-bit hash of every loss and every parameter bit, in fp32 and in bf16. Run under every CPU
// kernel variant (LOOM_CPU_ISA) and thread count (OMP_NUM_THREADS), it must print the same line:
// the determinism.variants_and_threads test compares them. Sizes are ragged on purpose (width 88,
// heads of 44, sequences of 67, a vocabulary of 90 padded to 128) and large enough that every
// kernel splits its work between threads; --small trains a model a tenth the size (width 40,
// sequences of 37, vocabulary 70), for runs under an emulator.
#include <omp.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "loom/kernels/cpu_isa.hpp"
#include "loom/loom.hpp"

namespace {

class FixedBatches : public loom::data::BatchSource {
 public:
  FixedBatches(std::int64_t batch, std::int64_t steps, std::int64_t vocab) : vocab_(vocab) {
    std::mt19937 rng(7);
    std::uniform_int_distribution<std::int32_t> token(0, static_cast<std::int32_t>(vocab - 1));
    for (int i = 0; i < 4; ++i) {
      loom::data::Batch b{loom::Tensor::empty({batch, steps}, loom::DType::i32),
                          loom::Tensor::empty({batch, steps}, loom::DType::i32)};
      for (std::int32_t& v : b.inputs.span<std::int32_t>()) v = token(rng);
      for (std::int32_t& v : b.targets.span<std::int32_t>()) v = token(rng);
      batches_.push_back(b);
    }
  }
  loom::data::Batch next() override { return batches_[static_cast<std::size_t>(position_++ % 4)]; }
  std::int64_t position() const override { return position_; }
  void seek(std::int64_t p) override { position_ = p; }
  std::int64_t vocab_size() const override { return vocab_; }

 private:
  std::vector<loom::data::Batch> batches_;
  std::int64_t vocab_, position_ = 0;
};

// FNV-1a over bytes.
struct Hash {
  std::uint64_t value = 1469598103934665603ull;
  void add(const void* data, std::size_t bytes) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < bytes; ++i) value = (value ^ p[i]) * 1099511628211ull;
  }
};

std::uint64_t train(const std::string& precision_name, bool small) {
  loom::nn::GPTConfig config;
  config.vocab_size = small ? 70 : 90;
  config.context = small ? 37 : 67;
  config.layers = 2;
  config.heads = 2;
  config.channels = small ? 40 : 88;
  loom::nn::GPT model(config, loom::nn::Precision::parse(precision_name), loom::Device::cpu());
  FixedBatches data(small ? 3 : 6, config.context, config.vocab_size);
  loom::train::TrainerOptions options;
  options.grad_accumulation = 2;
  options.schedule = {.max_lr = 3e-3f, .min_lr = 3e-4f, .warmup = 1, .total = 5};
  loom::train::Trainer trainer(model, data, options);
  Hash hash;
  for (int step = 0; step < 5; ++step) {
    const loom::train::StepResult r = trainer.step();
    hash.add(&r.loss, sizeof r.loss);
    hash.add(&r.grad_norm, sizeof r.grad_norm);
  }
  for (const loom::nn::Parameter* p : model.parameters()) hash.add(p->value().raw_data(), p->value().nbytes());
  return hash.value;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc > 1 && std::strcmp(argv[1], "--isas") == 0) {  // the variants this CPU runs, one per line
      for (loom::kernels::CpuIsa isa : loom::kernels::supported_cpu_isas()) {
        std::printf("%s\n", std::string(loom::kernels::to_string(isa)).c_str());
      }
      return 0;
    }
    const bool small = argc > 1 && std::strcmp(argv[1], "--small") == 0;
    const std::uint64_t fp32 = train("fp32", small), bf16 = train("bf16", small);
    // The variant and thread count go to stderr: stdout must be the same line everywhere.
    std::fprintf(stderr, "kernels %s, %d threads\n",
                 std::string(loom::kernels::to_string(loom::kernels::active_cpu_isa())).c_str(), omp_get_max_threads());
    std::printf("fingerprint fp32 %016llx bf16 %016llx\n", static_cast<unsigned long long>(fp32),
                static_cast<unsigned long long>(bf16));
    return 0;
  } catch (const loom::Error& error) {
    std::fprintf(stderr, "gpt_fingerprint: %s\n", error.what());
    return 1;
  }
}
