// plan::plan: the model state it predicts per layout is, to the byte, what shard::model_state_bytes
// says of the built GPT (its parameter space laid out for the data ranks, at TP 1 and 2); its
// data-parallel communication time is the cost model's for the built space's units and buckets;
// on the 16-node H100 fixture it recommends a fitting layout for a 7B-class model with the most
// tokens/s and gives every other layout a reason; bad requests are refused by name.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "loom/comm/in_process.hpp"
#include "loom/nn/gpt.hpp"
#include "loom/plan/plan.hpp"
#include "loom/shard/memory.hpp"
#include "loom/topo/planner.hpp"
#include "loom/topo/topology_json.hpp"

namespace {

using loom::nn::ActivationCheckpointing;
namespace topo = loom::topo;

topo::Topology fixture(const std::string& name) {
  return topo::load_topology(std::string(LOOM_SOURCE_DIR) + "/tests/fixtures/topo/" + name);
}

// One host of `gpus` H100s on NVSwitch.
topo::Topology host_of(int gpus) {
  topo::Topology t = fixture("cluster-16x-hgx-h100.json");
  t.hosts.resize(1);
  t.hosts[0].gpus.resize(static_cast<std::size_t>(gpus));
  t.ranks.clear();
  return t;
}

loom::nn::GPTConfig small() {
  loom::nn::GPTConfig m;
  m.layers = 3;
  m.heads = 4;
  m.channels = 96;
  m.context = 40;
  m.vocab_size = 300;
  return m;
}

const loom::plan::LayoutPlan& find(const loom::plan::PlanResult& r, int tensor, int stage, ActivationCheckpointing mode) {
  const auto it = std::find_if(r.layouts.begin(), r.layouts.end(), [&](const loom::plan::LayoutPlan& l) {
    return l.tensor == tensor && l.stage == stage && l.checkpointing == mode;
  });
  REQUIRE(it != r.layouts.end());
  return *it;
}

void check_same(const loom::shard::ModelStateBytes& a, const loom::shard::ModelStateBytes& b) {
  CHECK(a.values == b.values);
  CHECK(a.gradients == b.gradients);
  CHECK(a.masters == b.masters);
  CHECK(a.moments == b.moments);
  CHECK(a.buffers == b.buffers);
}

}  // namespace

TEST_CASE("loom-plan's model state is model_state_bytes of the built model, to the byte", "[plan]") {
  for (const std::string precision : {"fp32", "bf16"}) {
    loom::plan::PlanRequest request;
    request.model = small();
    request.precision = precision;
    request.topology = host_of(4);
    request.tensor_sizes = {1, 2};
    const loom::plan::PlanResult result = loom::plan::plan(request);
    const loom::nn::Precision p = loom::nn::Precision::parse(precision);
    const loom::nn::GPT whole(small(), p, loom::Device::cpu());
    for (int stage = 0; stage <= 3; ++stage) {
      INFO(precision << ", ZeRO-" << stage);
      check_same(find(result, 1, stage, ActivationCheckpointing::none).model_state,
                 loom::shard::model_state_bytes(whole, loom::optim::OptimizerKind::adamw, stage, 4));
      CHECK(loom::plan::gpt_unit_elements(small(), 1, 4) == whole.parameter_space().unit_elements_at(4));
    }
    // TP 2: every rank's space holds its blocks' shards; the data ranks are the other 2.
    std::vector<loom::shard::ModelStateBytes> built(4);
    std::vector<std::int64_t> units;
    loom::comm::run_in_process(2, [&](loom::comm::Communicator& tensor) {
      const loom::nn::GPT model(small(), p, loom::Device::cpu(), 1, {}, &tensor);
      if (tensor.rank() != 1) return;
      units = model.parameter_space().unit_elements_at(2);
      for (int stage = 0; stage <= 3; ++stage) {
        built[static_cast<std::size_t>(stage)] =
            loom::shard::model_state_bytes(model, loom::optim::OptimizerKind::adamw, stage, 2);
      }
    });
    CHECK(loom::plan::gpt_unit_elements(small(), 2, 2) == units);
    for (int stage = 0; stage <= 3; ++stage) {
      INFO(precision << ", TP 2, ZeRO-" << stage);
      check_same(find(result, 2, stage, ActivationCheckpointing::none).model_state, built[static_cast<std::size_t>(stage)]);
    }
  }
}

TEST_CASE("loom-plan's data-parallel communication is the cost model's for the same messages", "[plan]") {
  loom::plan::PlanRequest request;
  request.model = small();
  request.topology = fixture("cluster-16x-hgx-h100.json");
  request.tensor_sizes = {1};
  request.grad_accum = 2;
  const loom::plan::PlanResult result = loom::plan::plan(request);
  const topo::Planner planner(request.topology);
  const loom::nn::GPT whole(small(), loom::nn::Precision::bf16(), loom::Device::cpu());
  const std::vector<std::int64_t> units = whole.parameter_space().unit_elements_at(128);
  auto time = [&](topo::Collective c, std::int64_t bytes) { return planner.choose(c, bytes).prediction.seconds; };
  std::int64_t elements = 0;
  double zero1 = 0, zero3 = 0;
  for (std::size_t i = 0; i < units.size(); ++i) {
    const std::int64_t u = units[i];
    elements += u;
    zero1 += time(topo::Collective::reduce_scatter, 4 * u) + time(topo::Collective::all_gather, 2 * u);
    // ZeRO-3, 2 micro-batches: a gather in forward and in backward (one for the root unit, which
    // stays gathered, and for the last block, kept from forward to backward) and a reduce-scatter.
    const int gathers = i == 0 || i + 1 == units.size() ? 1 : 2;
    zero3 += 2 * (gathers * time(topo::Collective::all_gather, 2 * u) + time(topo::Collective::reduce_scatter, 4 * u));
  }
  double ddp = 0;  // the fp32 gradients in the planner's buckets, once per step
  const std::int64_t bucket = planner.recommended_bucket_bytes();
  for (std::int64_t left = 4 * elements; left > 0; left -= bucket) ddp += time(topo::Collective::all_reduce, std::min(bucket, left));
  CHECK(find(result, 1, 0, ActivationCheckpointing::none).data_seconds == Approx(ddp).epsilon(1e-12));
  CHECK(find(result, 1, 1, ActivationCheckpointing::none).data_seconds == Approx(zero1).epsilon(1e-12));
  CHECK(find(result, 1, 3, ActivationCheckpointing::none).data_seconds == Approx(zero3).epsilon(1e-12));
  CHECK(find(result, 1, 0, ActivationCheckpointing::none).data_bytes == 4 * elements);
}

TEST_CASE("loom-plan recommends a layout for a 7B-class model on 16 HGX H100 nodes and says why not the others",
          "[plan]") {
  loom::plan::PlanRequest request;
  request.model.layers = 32;
  request.model.heads = 32;
  request.model.channels = 4096;
  request.model.context = 2048;
  request.model.vocab_size = 50257;
  request.topology = fixture("cluster-16x-hgx-h100.json");
  const loom::plan::PlanResult result = loom::plan::plan(request);
  REQUIRE(result.recommended.has_value());
  const loom::plan::LayoutPlan& best = result.layouts[*result.recommended];
  CHECK(best.total() <= best.usable(request.headroom));
  CHECK(best.reason.empty());
  CHECK(result.layouts.size() == 4 * 4 * 3);
  for (const loom::plan::LayoutPlan& l : result.layouts) {
    if (&l == &best) continue;
    INFO(l.name() << ": " << l.reason);
    CHECK(!l.reason.empty());
    if (l.total() <= l.usable(request.headroom)) CHECK(l.tokens_per_second <= best.tokens_per_second);
  }
  // 7B's model state alone (16 bytes per parameter and 2 of values) does not fit one 80 GB GPU
  // under DDP; activations shrink in the checkpointing order.
  CHECK(find(result, 1, 0, ActivationCheckpointing::full).reason.find("does not fit") == 0);
  const auto& none = find(result, 1, 3, ActivationCheckpointing::none);
  const auto& selective = find(result, 1, 3, ActivationCheckpointing::selective);
  const auto& full = find(result, 1, 3, ActivationCheckpointing::full);
  CHECK(none.activations.total() > selective.activations.total());
  CHECK(selective.activations.total() > full.activations.total());
  CHECK(full.compute_seconds > selective.compute_seconds);
  CHECK(plan_json(result).find("\"recommended\": \"" + best.name() + "\"") != std::string::npos);
}

TEST_CASE("loom-plan names what it cannot plan", "[plan]") {
  loom::plan::PlanRequest request;
  request.model = small();
  request.topology = fixture("cluster-16x-hgx-h100.json");
  request.tensor_sizes = {3, 16};
  const loom::plan::PlanResult result = loom::plan::plan(request);
  CHECK_FALSE(result.recommended.has_value());
  CHECK(result.layouts.front().reason == "cannot run: 3 does not divide the 128 ranks");
  CHECK(result.layouts.back().reason == "cannot run: a tensor group must sit in one host of 8 GPUs");
  CHECK(loom::plan::format_plan(result).find("nothing fits") != std::string::npos);

  loom::plan::PlanRequest cpu = request;
  cpu.topology.hosts.resize(1);
  cpu.topology.hosts[0].gpus.clear();
  CHECK_THROWS_WITH(loom::plan::plan(cpu), Catch::Contains("every rank of the topology must run on a GPU"));
  loom::plan::PlanRequest unknown = request;
  for (auto& gpu : unknown.topology.hosts[0].gpus) gpu.arch = "sm_89";
  unknown.tensor_sizes = {1};
  CHECK_THROWS_WITH(loom::plan::plan(unknown), Catch::Contains("no peak for") && Catch::Contains("--peak-tflops"));
  unknown.peak_tflops = 100;
  CHECK_NOTHROW(loom::plan::plan(unknown));
  loom::plan::PlanRequest bad = request;
  bad.precision = "fp8";
  CHECK_THROWS_WITH(loom::plan::plan(bad), Catch::Contains("fp8"));
}

TEST_CASE("hgx_cluster builds the HGX H100 fixture's cluster, and loom-plan predicts the same on both", "[plan]") {
  loom::plan::PlanRequest request;
  request.model = {.vocab_size = 50257, .context = 2048, .layers = 32, .heads = 32, .channels = 4096};
  request.topology = fixture("cluster-16x-hgx-h100.json");
  const loom::plan::PlanResult expected = loom::plan::plan(request);
  request.topology = loom::plan::hgx_cluster("H100", 128);
  REQUIRE(request.topology.hosts.size() == 16);
  const loom::plan::PlanResult got = loom::plan::plan(request);
  REQUIRE(expected.recommended.has_value());
  REQUIRE(got.recommended == expected.recommended);
  CHECK(got.layouts[*got.recommended].step_seconds == Approx(expected.layouts[*expected.recommended].step_seconds));
  // A partial last server, other kinds, and an unknown kind named.
  const topo::Topology twenty = loom::plan::hgx_cluster("A100", 20);
  REQUIRE(twenty.hosts.size() == 3);
  CHECK(twenty.hosts[2].gpus.size() == 4);
  CHECK(twenty.hosts[0].nics[0].gbits == 200);
  CHECK(loom::plan::hgx_cluster("H200", 1).hosts[0].gpus[0].memory_bytes == (141LL << 30));
  CHECK_THROWS_WITH(loom::plan::hgx_cluster("B200", 8), Catch::Contains("unknown GPU kind 'B200'"));
}
