// kernel_bench: achieved memory bandwidth of loom's memory-bound kernels against the device's
// copy bandwidth measured in the same run (a tensor copy: bytes read + bytes written), on the CPU
// or a GPU. Timed with loom's streams and events, so the same code times both. Prints a table;
// --json writes the record.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "bench_report.hpp"
#include "loom/kernels/cast.hpp"
#include "loom/kernels/cross_entropy.hpp"
#include "loom/kernels/elementwise.hpp"
#include "loom/kernels/layernorm.hpp"
#include "loom/kernels/optimizer.hpp"
#include "loom/kernels/softmax.hpp"
#include "loom/loom.hpp"

namespace {

struct KernelCase {
  std::string name;
  double bytes;                  // bytes the kernel must read and write at least once
  std::function<void()> run;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("kernel_bench: memory-bound kernels against the same-run copy bandwidth");
  std::string dtype_name = "bf16", device_name = "auto", json_path;
  std::int64_t rows = 4096, channels = 768;
  int repeats = 5;
  app.add_option("--dtype", dtype_name, "activation dtype: f32, bf16 or f16");
  app.add_option("--device", device_name, "cpu, cuda:N or auto (a GPU when there is one)");
  app.add_option("--rows", rows, "rows (tokens)")->check(CLI::PositiveNumber);
  app.add_option("--channels", channels, "channels per row")->check(CLI::PositiveNumber);
  app.add_option("--repeats", repeats, "timed repeats; the median is reported")->check(CLI::PositiveNumber);
  app.add_option("--json", json_path, "write the JSON record here");
  CLI11_PARSE(app, argc, argv);

  try {
    const loom::DType dtype = loom::parse_dtype(dtype_name);
    const loom::Device device = loom::bench::bench_device(device_name);
    const loom::Stream stream(device);
    const loom::StreamRef s = stream.ref();
    const std::int64_t n = rows * channels;
    const double e = static_cast<double>(loom::dtype_size(dtype)), nd = static_cast<double>(n);
    std::mt19937 rng(9);
    auto empty = [&](const loom::Shape& shape, loom::DType t) { return loom::Tensor::empty(shape, t, device); };
    auto zeros = [&](const loom::Shape& shape) { return loom::Tensor::zeros(shape, loom::DType::f32, device); };
    const loom::Tensor x = loom::bench::random_tensor({rows, channels}, dtype, device, rng), y = loom::bench::random_tensor({rows, channels}, dtype, device, rng);
    const loom::Tensor out = empty({rows, channels}, dtype);
    const loom::Tensor w = loom::bench::random_tensor({channels}, dtype, device, rng), b = loom::bench::random_tensor({channels}, dtype, device, rng);
    const loom::Tensor mean = empty({rows}, loom::DType::f32), rstd = empty({rows}, loom::DType::f32);
    const loom::Tensor dw = zeros({channels}), db = zeros({channels});
    const loom::Tensor master = loom::bench::random_tensor({n}, loom::DType::f32, device, rng);
    const loom::Tensor m = zeros({n}), v = zeros({n});
    const loom::Tensor model = empty({n}, loom::DType::bf16);
    const loom::Tensor targets = loom::Tensor::zeros({rows}, loom::DType::i32, device), losses = empty({rows}, loom::DType::f32);
    loom::kernels::layernorm_forward(x, w, b, out, mean, rstd, 1e-5f, s);
    const loom::kernels::AdamWTensor adam{master, x.flatten(), m, v, model, true};

    const std::vector<KernelCase> cases = {
        {"copy (baseline)", 2 * nd * e, [&] { loom::copy(out, x, s); }},
        {"gelu_forward", 2 * nd * e, [&] { loom::kernels::gelu_forward(x, out, s); }},
        {"gelu_backward", 3 * nd * e, [&] { loom::kernels::gelu_backward(x, y, out, s); }},
        {"residual_add", 3 * nd * e, [&] { loom::kernels::residual_add(x, y, out, s); }},
        {"layernorm_forward", 2 * nd * e, [&] { loom::kernels::layernorm_forward(x, w, b, out, mean, rstd, 1e-5f, s); }},
        {"layernorm_backward", 3 * nd * e,
         [&] { loom::kernels::layernorm_backward(y, x, w, mean, rstd, out, dw, db, s); }},
        {"softmax_forward", 2 * nd * e, [&] { loom::kernels::softmax_forward(x, out, s); }},
        {"cross_entropy_fwd", nd * e, [&] { loom::kernels::cross_entropy_forward(x, targets, losses, {}, s); }},
        {"cast f32->bf16", nd * 6, [&] { loom::kernels::cast(master, model, {}, s); }},
        {"adamw_step", nd * (4 * 6 + e + 2), [&] { loom::kernels::adamw_step(std::span(&adam, 1), {}, s); }},
    };

    nlohmann::json record = loom::bench::make_record(
        "kernel_bench", {{"device", device.to_string()}, {"dtype", dtype_name}, {"rows", rows}, {"channels", channels}, {"repeats", repeats}});
    std::printf("%s\n%lld x %lld %s activations on %s, median of %d\n\n", loom::to_string(loom::build_info()).c_str(),
                static_cast<long long>(rows), static_cast<long long>(channels), dtype_name.c_str(),
                device.to_string().c_str(), repeats);
    std::printf("%-22s %10s %10s %10s\n", "kernel", "ms", "GB/s", "vs_copy");
    double copy_gbs = 0;
    for (const KernelCase& c : cases) {
      const double seconds = loom::bench::median_seconds(c.run, repeats, stream);
      const double gbs = c.bytes / seconds / 1e9;
      if (copy_gbs == 0) copy_gbs = gbs;
      std::printf("%-22s %10.3f %10.2f %9.0f%%\n", c.name.c_str(), seconds * 1e3, gbs, 100 * gbs / copy_gbs);
      record["rows"].push_back({{"kernel", c.name}, {"ms", seconds * 1e3}, {"gb_per_s", gbs}, {"vs_copy", gbs / copy_gbs}});
    }
    if (!json_path.empty()) loom::bench::write_json(json_path, record);
    return 0;
  } catch (const loom::Error& error) {
    std::fprintf(stderr, "%s\n", error.what());
    return 1;
  }
}
