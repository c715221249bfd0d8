// attention_bench: causal attention forward + backward, per path, on the CPU or a GPU. The
// composed path (GEMMs per sequence on strided head views, the reference) is the same-run
// baseline; against it the head-major path (every GEMM one call over all B x NH heads) and the
// fused path (FlashAttention-2: no T x T matrix; tensor cores for f16/bf16 with head size 64 or
// 128 on CUDA), and on the CPU in f32 the automatic path's causal kernel, the one GPT models run
// there. Rates use FlashAttention's count for causal attention: forward 2 B NH T^2 hs
// multiply-adds x 2 / 2, backward 2.5 times the forward. Prints a table; --json writes the record.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "bench_report.hpp"
#include "loom/kernels/attention.hpp"
#include "loom/kernels/cast.hpp"
#include "loom/loom.hpp"

namespace {


loom::kernels::GemmPrecision precision_of(loom::DType dtype) {
  if (dtype == loom::DType::bf16) return loom::kernels::GemmPrecision::bf16;
  if (dtype == loom::DType::f16) return loom::kernels::GemmPrecision::fp16;
  return loom::kernels::GemmPrecision::fp32;
}

struct PathCase {
  std::string name;
  std::function<void()> forward, backward;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("attention_bench: causal attention per path (composed, head-major, fused; on the CPU in f32 also "
               "the causal kernel), forward and backward");
  std::string dtype_name = "f32", device_name = "auto", json_path;
  std::int64_t batch = 2, steps = 256, heads = 4, head_size = 32;
  int repeats = 5;
  app.add_option("--dtype", dtype_name, "f32, bf16 or f16 (f32 runs fp32 GEMMs)");
  app.add_option("--device", device_name, "cpu, cuda:N or auto (a GPU when there is one)");
  app.add_option("--batch", batch, "sequences")->check(CLI::PositiveNumber);
  app.add_option("--context", steps, "sequence length T")->check(CLI::PositiveNumber);
  app.add_option("--heads", heads, "attention heads")->check(CLI::PositiveNumber);
  app.add_option("--head-size", head_size, "channels per head")->check(CLI::PositiveNumber);
  app.add_option("--repeats", repeats, "timed repeats; the median is reported")->check(CLI::PositiveNumber);
  app.add_option("--json", json_path, "write the JSON record here");
  CLI11_PARSE(app, argc, argv);

  try {
    const loom::DType dtype = loom::parse_dtype(dtype_name);
    const loom::Device device = loom::bench::bench_device(device_name);
    const loom::Stream stream(device);
    const loom::StreamRef s = stream.ref();
    const std::int64_t channels = heads * head_size;
    std::mt19937 rng(11);
    const loom::Tensor qkv = loom::bench::random_tensor({batch, steps, 3 * channels}, dtype, device, rng);
    const loom::Tensor dout = loom::bench::random_tensor({batch, steps, channels}, dtype, device, rng);
    const loom::Tensor out = loom::Tensor::empty({batch, steps, channels}, dtype, device);
    const loom::Tensor dqkv = loom::Tensor::empty(qkv.shape(), dtype, device);
    const loom::Tensor att = loom::Tensor::empty({batch, heads, steps, steps}, dtype, device);
    const loom::Tensor lse = loom::Tensor::empty({batch, heads, steps}, loom::DType::f32, device);

    auto stored = [&](loom::kernels::AttentionPath path) {
      loom::kernels::AttentionOptions options{heads, precision_of(dtype), path};
      return PathCase{"", [=] { loom::kernels::attention_forward(qkv, out, att, options, s); },
                      [=] { loom::kernels::attention_backward(dout, qkv, att, dqkv, options, s); }};
    };
    std::vector<PathCase> cases = {stored(loom::kernels::AttentionPath::composed),
                                   stored(loom::kernels::AttentionPath::head_major)};
    cases[0].name = "composed (baseline)";
    cases[1].name = "head-major";
    // The path a CPU f32 model takes (automatic: the causal kernel that skips the masked terms).
    if (device.is_cpu() && dtype == loom::DType::f32) {
      cases.push_back(stored(loom::kernels::AttentionPath::automatic));
      cases.back().name = "cpu causal";  // (the suite's figure ids take the name: no parentheses)
    }
    const loom::kernels::AttentionOptions fused_options{heads, precision_of(dtype)};
    cases.push_back({"fused", [=] { loom::kernels::fused_attention_forward(qkv, out, lse, fused_options, s); },
                     [=] { loom::kernels::fused_attention_backward(dout, qkv, out, lse, dqkv, fused_options, s); }});

    const double forward_flops = 2.0 * static_cast<double>(batch * heads * head_size) * static_cast<double>(steps) *
                                 static_cast<double>(steps);  // 4 B NH T^2 hs / 2 (causal)
    nlohmann::json record = loom::bench::make_record(
        "attention_bench", {{"device", device.to_string()}, {"dtype", dtype_name}, {"batch", batch}, {"context", steps},
                            {"heads", heads}, {"head_size", head_size}, {"repeats", repeats}});
    std::printf("%s\nB = %lld, T = %lld, %lld heads of %lld, %s on %s, median of %d\n\n",
                loom::to_string(loom::build_info()).c_str(), static_cast<long long>(batch),
                static_cast<long long>(steps), static_cast<long long>(heads), static_cast<long long>(head_size),
                dtype_name.c_str(), device.to_string().c_str(), repeats);
    std::printf("%-20s %10s %10s %10s %10s %9s\n", "path", "fwd ms", "bwd ms", "fwd TF/s", "bwd TF/s", "vs_base");
    double baseline = 0;
    for (const PathCase& c : cases) {
      c.forward();  // backward needs the forward's att or lse
      const double fwd = loom::bench::median_seconds(c.forward, repeats, stream);
      const double bwd = loom::bench::median_seconds(c.backward, repeats, stream);
      if (baseline == 0) baseline = fwd + bwd;
      const double fwd_tflops = forward_flops / fwd / 1e12, bwd_tflops = 2.5 * forward_flops / bwd / 1e12;
      std::printf("%-20s %10.3f %10.3f %10.2f %10.2f %8.2fx\n", c.name.c_str(), fwd * 1e3, bwd * 1e3, fwd_tflops,
                  bwd_tflops, baseline / (fwd + bwd));
      record["rows"].push_back({{"path", c.name}, {"forward_ms", fwd * 1e3}, {"backward_ms", bwd * 1e3},
                                {"forward_tflops", fwd_tflops}, {"backward_tflops", bwd_tflops},
                                {"speedup_vs_composed", baseline / (fwd + bwd)}});
    }
    if (!json_path.empty()) loom::bench::write_json(json_path, record);
    return 0;
  } catch (const loom::Error& error) {
    std::fprintf(stderr, "%s\n", error.what());
    return 1;
  }
}
