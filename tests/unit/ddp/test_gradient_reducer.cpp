// GradientReducer on in-process communicators (ranks as threads): exact averages on crafted
// gradients, buckets as ranges of the parameter space whatever the ready order, reductions started during
// backward, accumulation with no_sync, unused parameters, replicas that differ, the compression
// and user hooks. Rank threads only record what they saw; the test thread asserts (Catch2's
// assertions are not thread-safe).
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "loom/comm/in_process.hpp"
#include "loom/core/tensor_ops.hpp"
#include "loom/ddp/gradient_reducer.hpp"
#include "loom/train/trainer.hpp"
#include "support/ddp_equivalence.hpp"
#include "support/tensor_checks.hpp"
#include "support/tiny_gpt.hpp"

using loom::DType;
using loom::ErrorCategory;
using loom::Shape;
using loom::Tensor;
using loom::comm::Communicator;
using loom::ddp::GradientReducer;
using loom::ddp::ReducerOptions;
using loom::nn::Parameter;
using loom::test::IsError;
using loom::test::error_of;

namespace {

const std::vector<Shape> shapes{{3}, {64}, {5, 7}, {100}, {1}, {40, 3}};

// A model's worth of parameters for one rank; values differ by rank (the reducer broadcasts).
struct Params {
  std::vector<std::unique_ptr<Parameter>> owned;
  std::vector<Parameter*> list;
  std::unique_ptr<loom::model::ParameterSpace> space;  // one unit holding them all
  Params(int rank, const std::vector<Shape>& layout = shapes) {
    for (std::size_t j = 0; j < layout.size(); ++j) {
      std::string name = "p";  // (not "p" + to_string: GCC 12 warns falsely about that, -Wrestrict)
      name += std::to_string(j);
      owned.push_back(std::make_unique<Parameter>(name,
                                                  Tensor::full(layout[j], DType::f32, 10.0 * rank + static_cast<double>(j)),
                                                  DType::f32, false));
      list.push_back(owned.back().get());
    }
    space = std::make_unique<loom::model::ParameterSpace>(std::vector<loom::model::UnitSpec>{{"all", list}});
  }
};

// Rank r's gradient element i of parameter j: a small integer, exact in every dtype.
double crafted(int rank, std::size_t j, std::int64_t i) {
  return static_cast<double>((rank + 1) * static_cast<int>(j + 1) + static_cast<int>(i % 3));
}

// Adds rank r's crafted gradient of parameter j (as a layer's backward would) and marks it ready.
void backward_one(Parameter& p, int rank, std::size_t j) {
  std::vector<double> values(static_cast<std::size_t>(p.grad().numel()));
  const auto current = loom::to_doubles(p.grad());
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = current[i] + crafted(rank, j, static_cast<std::int64_t>(i));
  loom::copy(p.grad(), loom::from_doubles(values, DType::f32).view(p.grad().shape()));
  p.mark_grad_ready();
}

// The largest |gradient - expected| over all parameters, where expected is `micro` crafted
// contributions averaged over `size` ranks, with only `contributing` ranks counted for parameter skip.
double max_error(const std::vector<Parameter*>& params, int size, int micro) {
  double worst = 0;
  for (std::size_t j = 0; j < params.size(); ++j) {
    const auto got = loom::to_doubles(params[j]->grad());
    for (std::size_t i = 0; i < got.size(); ++i) {
      double sum = 0;
      for (int r = 0; r < size; ++r) sum += micro * crafted(r, j, static_cast<std::int64_t>(i));
      worst = std::max(worst, std::fabs(got[i] - sum / size));
    }
  }
  return worst;
}

}  // namespace

TEST_CASE("the reducer averages gradients exactly, bucket by bucket, starting during backward", "[ddp]") {
  for (int size : {1, 2, 3}) {
    INFO(size << " ranks");
    std::vector<double> errors(static_cast<std::size_t>(size), -1);
    std::vector<int> buckets(static_cast<std::size_t>(size)), started(static_cast<std::size_t>(size));
    std::vector<int> shared_views(static_cast<std::size_t>(size));
    loom::comm::run_in_process(size, [&](Communicator& comm) {
      Params params(comm.rank());
      ReducerOptions options;
      options.first_bucket_bytes = 64;
      options.bucket_bytes = 256;
      GradientReducer reducer(comm, *params.space, options);
      for (int iteration = 0; iteration < 2; ++iteration) {
        for (Parameter* p : params.list) p->zero_grad();
        for (std::size_t j = shapes.size(); j-- > 0;) backward_one(*params.list[j], comm.rank(), j);
        reducer.synchronize();
      }
      const auto r = static_cast<std::size_t>(comm.rank());
      errors[r] = max_error(params.list, size, 1);
      buckets[r] = reducer.stats().buckets;
      started[r] = reducer.stats().started_during_backward;
      // p4 [1] and p3 [100] are neighbours in backward order and share the 256-byte bucket.
      shared_views[r] = params.list[4]->grad().shares_storage_with(params.list[3]->grad());
    });
    for (int r = 0; r < size; ++r) {
      const auto i = static_cast<std::size_t>(r);
      CHECK(errors[i] == 0);
      CHECK(buckets[i] == 4);       // {p5}, {p4, p3}, {p2, p1}, {p0}: the caps close a bucket once reached
      CHECK(started[i] == 4);       // every bucket started inside backward, none in synchronize()
      CHECK(shared_views[i] == 1);  // gradients are views into the bucket buffers
    }
  }
}

TEST_CASE("the reducer gives every rank rank 0's parameter values", "[ddp]") {
  std::vector<std::vector<double>> seen(3);
  loom::comm::run_in_process(3, [&](Communicator& comm) {
    Params params(comm.rank());
    GradientReducer reducer(comm, *params.space);
    for (Parameter* p : params.list) seen[static_cast<std::size_t>(comm.rank())].push_back(loom::to_doubles(p->value())[0]);
  });
  for (const auto& values : seen) CHECK(values == std::vector<double>{0, 1, 2, 3, 4, 5});
}

TEST_CASE("buckets are ranges of the space, the same on every rank whatever order gradients arrive in", "[ddp]") {
  std::vector<std::vector<loom::ddp::BucketLayout>> before(2), after(2);
  std::vector<double> errors(2, -1);
  loom::comm::run_in_process(2, [&](Communicator& comm) {
    Params params(comm.rank());
    ReducerOptions options;
    options.first_bucket_bytes = 64;
    options.bucket_bytes = 256;
    GradientReducer reducer(comm, *params.space, options);
    const auto r = static_cast<std::size_t>(comm.rank());
    before[r] = reducer.bucket_layout();
    // Rank 0 produces gradients in registration order, rank 1 in reverse.
    for (std::size_t k = 0; k < shapes.size(); ++k) {
      const std::size_t j = comm.rank() == 0 ? k : shapes.size() - 1 - k;
      backward_one(*params.list[j], comm.rank(), j);
    }
    reducer.synchronize();
    after[r] = reducer.bucket_layout();
    const double first = max_error(params.list, 2, 1);
    for (std::size_t j = 0; j < shapes.size(); ++j) backward_one(*params.list[j], comm.rank(), j);
    reducer.synchronize();
    errors[r] = std::max(first, max_error(params.list, 2, 2));  // average + average
  });
  // Reverse space order; each bucket one range of the space: p5 at 384, then p4 (at 320) and p3 (at 192).
  REQUIRE(before[0].size() == 4);
  CHECK(before[0].front().parameter_names == std::vector<std::string>{"p5"});
  CHECK((before[0][1].begin == 192 && before[0][1].elements == 129));
  for (int r = 0; r < 2; ++r) {
    REQUIRE(after[static_cast<std::size_t>(r)].size() == before[0].size());
    for (std::size_t b = 0; b < before[0].size(); ++b) {
      CHECK(after[static_cast<std::size_t>(r)][b].parameter_names == before[0][b].parameter_names);
      CHECK(after[static_cast<std::size_t>(r)][b].begin == before[0][b].begin);
    }
  }
  CHECK(errors[0] == 0);
  CHECK(errors[1] == 0);
}

TEST_CASE("no_sync accumulates locally, and the last micro-batch reduces the sum once", "[ddp]") {
  std::vector<double> local_after_no_sync(3, -1), errors(3, -1);
  std::vector<int> started_in_no_sync(3, -1);
  loom::comm::run_in_process(3, [&](Communicator& comm) {
    Params params(comm.rank());
    GradientReducer reducer(comm, *params.space);
    const auto r = static_cast<std::size_t>(comm.rank());
    {
      auto skip = reducer.no_sync();
      for (std::size_t j = shapes.size(); j-- > 0;) backward_one(*params.list[j], comm.rank(), j);
      auto nested = reducer.no_sync();
      for (std::size_t j = shapes.size(); j-- > 0;) backward_one(*params.list[j], comm.rank(), j);
    }
    // Still this rank's own sum of two micro-batches: nothing was communicated.
    local_after_no_sync[r] = loom::to_doubles(params.list[2]->grad())[0];
    started_in_no_sync[r] = static_cast<int>(reducer.stats().reductions_started);
    for (std::size_t j = shapes.size(); j-- > 0;) backward_one(*params.list[j], comm.rank(), j);
    reducer.synchronize();
    errors[r] = max_error(params.list, 3, 3);
  });
  for (int r = 0; r < 3; ++r) {
    CHECK(local_after_no_sync[static_cast<std::size_t>(r)] == 2 * crafted(r, 2, 0));
    CHECK(started_in_no_sync[static_cast<std::size_t>(r)] == 0);  // nothing was communicated
    CHECK(errors[static_cast<std::size_t>(r)] == 0);
  }
}

TEST_CASE("a parameter without a gradient is an error on every rank, naming it, and never a hang", "[ddp]") {
  std::vector<std::string> first(3), second(3);
  loom::comm::run_in_process(3, [&](Communicator& comm) {
    Params params(comm.rank());
    GradientReducer reducer(comm, *params.space);
    for (std::size_t j = shapes.size(); j-- > 0;) {
      if (!(comm.rank() == 1 && j == 2)) backward_one(*params.list[j], comm.rank(), j);
    }
    first[static_cast<std::size_t>(comm.rank())] = error_of([&] { reducer.synchronize(); });
    // The reducer is ready for the next iteration.
    for (std::size_t j = shapes.size(); j-- > 0;) backward_one(*params.list[j], comm.rank(), j);
    second[static_cast<std::size_t>(comm.rank())] = error_of([&] { reducer.synchronize(); });
  });
  for (int r = 0; r < 3; ++r) {
    const std::string& what = first[static_cast<std::size_t>(r)];
    INFO(what);
    CHECK(what.find("received no gradient since the last synchronize(): 'p2' (rank 1)") != std::string::npos);
    CHECK(what.find("unused_parameters = reduce_zero") != std::string::npos);
    CHECK(what.find("[rank " + std::to_string(r) + "]") != std::string::npos);
    CHECK(second[static_cast<std::size_t>(r)] == "no error");
  }
}

TEST_CASE("reduce_zero reduces unused parameters as zero gradients", "[ddp]") {
  std::vector<std::vector<double>> p2(2), p5(2);
  loom::comm::run_in_process(2, [&](Communicator& comm) {
    Params params(comm.rank());
    ReducerOptions options;
    options.unused_parameters = loom::ddp::UnusedParameters::reduce_zero;
    GradientReducer reducer(comm, *params.space, options);
    loom::fill(params.list[5]->grad(), 7.0);  // stale: an unused gradient is zeroed, not reduced as it was
    for (std::size_t j = 0; j < 5; ++j) {
      if (!(comm.rank() == 1 && j == 2)) backward_one(*params.list[j], comm.rank(), j);  // p2 unused on rank 1
    }
    reducer.synchronize();
    p2[static_cast<std::size_t>(comm.rank())] = loom::to_doubles(params.list[2]->grad());
    p5[static_cast<std::size_t>(comm.rank())] = loom::to_doubles(params.list[5]->grad());
  });
  for (int r = 0; r < 2; ++r) {
    const auto& got = p2[static_cast<std::size_t>(r)];
    for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == crafted(0, 2, static_cast<std::int64_t>(i)) / 2);
    for (double v : p5[static_cast<std::size_t>(r)]) CHECK(v == 0);
  }
}

TEST_CASE("replicas that differ are refused on every rank, naming the first difference", "[ddp]") {
  std::vector<std::string> shape_errors(3), count_errors(2);
  loom::comm::run_in_process(3, [&](Communicator& comm) {
    std::vector<Shape> layout = shapes;
    if (comm.rank() == 2) layout[3] = Shape{101};
    Params params(comm.rank(), layout);
    shape_errors[static_cast<std::size_t>(comm.rank())] = error_of([&] { GradientReducer reducer(comm, *params.space); });
  });
  for (const std::string& what : shape_errors) {
    INFO(what);
    CHECK(what.find("data-parallel replicas differ: parameter #3 is 'p3' (100) f32 on rank 0 but 'p3' (101) f32 on "
                    "rank 2") != std::string::npos);
  }
  loom::comm::run_in_process(2, [&](Communicator& comm) {
    std::vector<Shape> layout = shapes;
    if (comm.rank() == 1) layout.pop_back();
    Params params(comm.rank(), layout);
    count_errors[static_cast<std::size_t>(comm.rank())] = error_of([&] { GradientReducer reducer(comm, *params.space); });
  });
  for (const std::string& what : count_errors) {
    INFO(what);
    CHECK(what.find("parameter #5 is 'p5' (40, 3) f32 on rank 0 but nothing (5 parameters) on rank 1") !=
          std::string::npos);
  }
}

TEST_CASE("fp16 and bf16 compression average crafted gradients exactly and random ones within rounding", "[ddp]") {
  for (DType wire : {DType::f16, DType::bf16}) {
    INFO(loom::dtype_name(wire));
    std::vector<double> exact_errors(4, -1), random_errors(4, -1), scales(4, 0);
    loom::comm::run_in_process(4, [&](Communicator& comm) {
      Params params(comm.rank());
      ReducerOptions options;
      options.hook = loom::ddp::compression_hook(wire);
      options.bucket_bytes = 256;
      GradientReducer reducer(comm, *params.space, options);
      for (std::size_t j = shapes.size(); j-- > 0;) backward_one(*params.list[j], comm.rank(), j);
      reducer.synchronize();
      const auto r = static_cast<std::size_t>(comm.rank());
      exact_errors[r] = max_error(params.list, 4, 1);
      // Random gradients against the fp64 mean: each summand is rounded once, the sum once more.
      std::mt19937 rng(static_cast<std::uint32_t>(99));
      std::normal_distribution<double> normal(0.0, 1.0);
      std::vector<std::vector<double>> all(4);
      for (Parameter* p : params.list) {
        p->zero_grad();
        for (auto& v : all) v.assign(static_cast<std::size_t>(p->grad().numel()), 0);
        for (auto& v : all) for (double& x : v) x = normal(rng);  // every rank draws all ranks' values alike
        loom::copy(p->grad(), loom::from_doubles(all[r], DType::f32).view(p->grad().shape()));
        p->mark_grad_ready();
      }
      reducer.synchronize();
      std::mt19937 again(static_cast<std::uint32_t>(99));
      double worst = 0;
      for (Parameter* p : params.list) {
        for (auto& v : all) v.assign(static_cast<std::size_t>(p->grad().numel()), 0);
        for (auto& v : all) for (double& x : v) x = normal(again);
        const auto got = loom::to_doubles(p->grad());
        for (std::size_t i = 0; i < got.size(); ++i) {
          const double mean = (all[0][i] + all[1][i] + all[2][i] + all[3][i]) / 4;
          worst = std::max(worst, std::fabs(got[i] - mean));
        }
      }
      random_errors[r] = worst;
    });
    // |x| < ~4.5: four roundings of x/4 and one of the sum, each at most 2^-p relative (p = 11 for
    // f16, 8 for bf16), add up to at most (4.5 + 4.5) 2^-p.
    const double ulp = wire == DType::f16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
    for (int r = 0; r < 4; ++r) {
      CHECK(exact_errors[static_cast<std::size_t>(r)] == 0);
      CHECK(random_errors[static_cast<std::size_t>(r)] > 0);  // it really went through 16 bits
      CHECK(random_errors[static_cast<std::size_t>(r)] < 12 * ulp);
    }
  }
}

TEST_CASE("a user hook reduces each bucket once, in bucket order, and its finish step runs", "[ddp]") {
  std::vector<std::vector<int>> calls(2);
  std::vector<double> errors(2, -1);
  loom::comm::run_in_process(2, [&](Communicator& comm) {
    Params params(comm.rank());
    const auto r = static_cast<std::size_t>(comm.rank());
    ReducerOptions options;
    options.bucket_bytes = 256;
    options.first_bucket_bytes = 64;
    // Sum, then halve on the host in finish (a CPU-only hook, for the test).
    options.hook = [&calls, r](Communicator& c, const loom::ddp::GradBucket& bucket) {
      calls[r].push_back(bucket.index);
      loom::ddp::PendingReduction pending;
      pending.work = c.all_reduce(bucket.gradients, bucket.gradients, loom::comm::ReduceOp::sum);
      pending.finish = [gradients = bucket.gradients, size = c.size()] {
        for (float& v : gradients.span<float>()) v /= static_cast<float>(size);
      };
      return pending;
    };
    GradientReducer reducer(comm, *params.space, options);
    for (std::size_t j = shapes.size(); j-- > 0;) backward_one(*params.list[j], comm.rank(), j);
    reducer.synchronize();
    errors[r] = max_error(params.list, 2, 1);
  });
  for (std::size_t r = 0; r < 2; ++r) {
    CHECK(calls[r] == std::vector<int>{0, 1, 2, 3});
    CHECK(errors[r] == 0);
  }
}

TEST_CASE("the reducer refuses misuse with clear errors", "[ddp]") {
  auto comms = loom::comm::make_in_process_communicators(1);
  Communicator& comm = *comms[0];
  Params params(0);
  ReducerOptions negative;
  negative.bucket_bytes = -1;
  CHECK_THROWS_MATCHES(GradientReducer(comm, *params.space, negative), loom::Error,
                       IsError(ErrorCategory::invalid_argument, {"bucket sizes must be >= 0"}));
  {
    GradientReducer reducer(comm, *params.space);
    {
      auto skip = reducer.no_sync();
      CHECK_THROWS_MATCHES(reducer.synchronize(), loom::Error,
                           IsError(ErrorCategory::invalid_argument, {"synchronize() inside a no_sync() scope"}));
    }
    params.list[0]->mark_grad_ready();
    CHECK_THROWS_MATCHES(params.list[0]->mark_grad_ready(), loom::Error,
                         IsError(ErrorCategory::invalid_argument, {"'p0' got another gradient after its final one",
                                                                   "no_sync()"}));
    for (std::size_t j = 1; j < shapes.size(); ++j) params.list[j]->mark_grad_ready();
    reducer.synchronize();
  }
  // Once the reducer is gone its hooks are too: marking a gradient ready does nothing.
  params.list[0]->mark_grad_ready();
  params.list[0]->mark_grad_ready();
}

TEST_CASE("a hook failing on one rank fails synchronize() on every rank, naming that rank", "[ddp]") {
  std::vector<std::string> first(3), second(3);
  std::vector<double> errors(3, -1);
  loom::comm::run_in_process(3, [&](Communicator& comm) {
    Params params(comm.rank());
    ReducerOptions options;
    options.bucket_bytes = 256;
    int calls = 0;
    options.hook = [&calls, rank = comm.rank()](Communicator& c, const loom::ddp::GradBucket& bucket) {
      if (rank == 1 && calls++ == 0) loom::fail(ErrorCategory::cuda, "injected failure in bucket ", bucket.index);
      return loom::ddp::average_hook()(c, bucket);
    };
    GradientReducer reducer(comm, *params.space, options);
    const auto r = static_cast<std::size_t>(comm.rank());
    for (std::size_t j = shapes.size(); j-- > 0;) backward_one(*params.list[j], comm.rank(), j);  // does not throw
    first[r] = error_of([&] { reducer.synchronize(); });
    for (Parameter* p : params.list) p->zero_grad();
    for (std::size_t j = shapes.size(); j-- > 0;) backward_one(*params.list[j], comm.rank(), j);
    second[r] = error_of([&] { reducer.synchronize(); });
    errors[r] = max_error(params.list, 3, 1);
  });
  INFO(first[0] << "\n" << first[1] << "\n" << first[2]);
  CHECK(first[0].find("loom CUDA error [rank 0]: gradient reducer: synchronize(): rank 1 failed: injected failure in "
                      "bucket 0") != std::string::npos);
  CHECK(first[1].find("loom CUDA error") == 0);  // its own error, as the hook threw it
  CHECK(first[1].find("injected failure in bucket 0") != std::string::npos);
  CHECK(first[1].find("rank 1 failed") == std::string::npos);
  CHECK(first[2].find("rank 1 failed: injected failure in bucket 0") != std::string::npos);
  for (std::size_t r = 0; r < 3; ++r) {
    CHECK(second[r] == "no error");  // the reducer goes on
    CHECK(errors[r] == 0);
  }
}

TEST_CASE("a non-finite gradient on one rank makes every rank skip the step", "[ddp]") {
  std::vector<int> skipped(2, -1);
  std::vector<std::vector<float>> before(2), after(2);
  loom::comm::run_in_process(2, [&](Communicator& comm) {
    loom::nn::GPT model(loom::test::tiny_gpt(32, 8), loom::nn::Precision::fp32(), loom::Device::cpu(), 3);
    // Added before the reducer's hook, so it runs first: rank 1's ln_f.bias gradient becomes inf.
    if (comm.rank() == 1) {
      model.parameters().back()->add_grad_ready_hook([](Parameter& p, loom::StreamRef) { loom::fill(p.grad(), INFINITY); });
    }
    loom::test::GlobalBatchSlice data(4, 2 * comm.rank(), 2);
    loom::train::TrainerOptions options;
    options.schedule.total = 1;  // max_lr for the first step, min_lr after
    loom::train::Trainer trainer(model, data, options, &comm);
    const auto r = static_cast<std::size_t>(comm.rank());
    for (const Parameter* p : model.parameters()) for (float v : p->value().to_vector<float>()) before[r].push_back(v);
    skipped[r] = trainer.step().skipped;
    for (const Parameter* p : model.parameters()) for (float v : p->value().to_vector<float>()) after[r].push_back(v);
  });
  CHECK(skipped[0] == 1);
  CHECK(skipped[1] == 1);
  CHECK(after[0] == before[0]);  // no update anywhere
  CHECK(after[1] == before[0]);
}

TEST_CASE("no_sync after a synchronized backward, and options that differ across ranks, are refused", "[ddp]") {
  std::vector<std::string> late(2), options_differ(2);
  loom::comm::run_in_process(2, [&](Communicator& comm) {
    Params params(comm.rank());
    {
      GradientReducer reducer(comm, *params.space);
      for (std::size_t j = shapes.size(); j-- > 0;) backward_one(*params.list[j], comm.rank(), j);
      late[static_cast<std::size_t>(comm.rank())] = error_of([&] { auto skip = reducer.no_sync(); });
      reducer.synchronize();
    }
    ReducerOptions options;
    if (comm.rank() == 1) options.bucket_bytes = 1 << 20;
    options_differ[static_cast<std::size_t>(comm.rank())] =
        error_of([&] { GradientReducer reducer(comm, *params.space, options); });
  });
  for (int r = 0; r < 2; ++r) {
    INFO(late[static_cast<std::size_t>(r)] << "\n" << options_differ[static_cast<std::size_t>(r)]);
    CHECK(late[static_cast<std::size_t>(r)].find("no_sync() after a synchronized backward") != std::string::npos);
    CHECK(options_differ[static_cast<std::size_t>(r)].find("the options differ across ranks: rank 0 has bucket_bytes "
                                                           "26214400") != std::string::npos);
    CHECK(options_differ[static_cast<std::size_t>(r)].find("rank 1 has bucket_bytes 1048576") != std::string::npos);
  }
}
