// The communication meter on crafted intervals (the union of overlapping calls, small calls left out
// of the bandwidth, nccl-tests' bus factors, the prediction's ratio) and through an observed
// in-process communicator: every collective counted with its bytes, before wait() returns.
#include <catch2/catch.hpp>

#include <chrono>
#include <memory>

#include "loom/comm/in_process.hpp"
#include "loom/core/tensor.hpp"
#include "loom/telemetry/comm_meter.hpp"

using loom::telemetry::CollectiveKind;
using loom::telemetry::CommMeter;

TEST_CASE("the meter adds the union of a kind's intervals and gives the bus bandwidth", "[telemetry]") {
  CommMeter meter;
  const auto t0 = CommMeter::Clock::now();
  const auto ms = [&](int n) { return t0 + std::chrono::milliseconds(n); };
  // Two 1 MiB all-reduces, the second queued behind the first: in flight 0-10 and 5-20 ms, 20 ms in all.
  meter.add(CollectiveKind::all_reduce, 1 << 20, ms(0), ms(10));
  meter.add(CollectiveKind::all_reduce, 1 << 20, ms(5), ms(20));
  meter.add(CollectiveKind::all_reduce, 8, ms(20), ms(30));  // the loss's mean: counted, not measured
  meter.add(CollectiveKind::all_gather, 4 << 20, ms(0), ms(8));
  loom::telemetry::CommTotals totals = meter.take(4);
  const auto& ar = totals[CollectiveKind::all_reduce];
  CHECK(ar.calls == 3);
  CHECK(ar.measured_calls == 2);
  CHECK(ar.bytes == 2 << 20);
  CHECK(ar.seconds == Approx(0.020));
  // all-reduce: 2 (n - 1) / n = 1.5 of the buffer per rank; all-gather (n - 1) / n = 0.75.
  CHECK(totals.bus_bytes_per_second(CollectiveKind::all_reduce) == Approx((2 << 20) * 1.5 / 0.020));
  CHECK(totals.bus_bytes_per_second(CollectiveKind::all_gather) == Approx((4 << 20) * 0.75 / 0.008));
  CHECK_FALSE(totals.predicted_bus_bytes_per_second(CollectiveKind::all_reduce).has_value());
  totals[CollectiveKind::all_reduce].predicted_seconds = 0.005;
  CHECK(*totals.predicted_bus_bytes_per_second(CollectiveKind::all_reduce) ==
        Approx(4 * totals.bus_bytes_per_second(CollectiveKind::all_reduce)));
  CHECK(meter.take(4)[CollectiveKind::all_reduce].calls == 0);  // taken: a fresh start
  meter.add(CollectiveKind::all_reduce, 1 << 20, ms(0), ms(10));
  CHECK(meter.take(1).bus_bytes_per_second(CollectiveKind::all_reduce) == 0);  // one rank moves nothing
}

TEST_CASE("an observed communicator meters every call before wait() returns", "[telemetry]") {
  std::vector<loom::telemetry::CommTotals> totals(2);
  std::vector<int> sizes(2);  // Catch's assertions are not thread-safe: checked after the ranks end
  loom::comm::run_in_process(2, [&](loom::comm::Communicator& comm) {
    const auto meter = std::make_shared<CommMeter>();
    const auto observed = loom::telemetry::observed_communicator(comm, nullptr, meter);
    sizes[static_cast<std::size_t>(comm.rank())] = observed->size();
    const loom::Tensor t = loom::Tensor::full({1 << 16}, loom::DType::f32, 1.0);  // 256 KiB
    observed->all_reduce(t, t, loom::comm::ReduceOp::sum).wait();
    const loom::Tensor gathered = loom::Tensor::empty({2 << 16}, loom::DType::f32);
    observed->all_gather(t, gathered).wait();
    observed->barrier().wait();
    totals[static_cast<std::size_t>(comm.rank())] = meter->take(comm.size());
  });
  CHECK(sizes == std::vector<int>{2, 2});
  for (const auto& t : totals) {
    CHECK(t[CollectiveKind::all_reduce].calls == 1);
    CHECK(t[CollectiveKind::all_reduce].bytes == 256 << 10);
    CHECK(t[CollectiveKind::all_gather].bytes == 512 << 10);
    CHECK(t[CollectiveKind::other].calls == 1);  // the barrier
    CHECK(t.bus_bytes_per_second(CollectiveKind::all_reduce) > 0);
  }
}

TEST_CASE("a device-timed call counts its device time, not its host span", "[telemetry]") {
  CommMeter meter;
  const auto t0 = CommMeter::Clock::now();
  const auto ms = [&](int n) { return t0 + std::chrono::milliseconds(n); };
  // Called at 0 behind 40 ms of compute, seen done at 50 ms; it ran 4 ms on the device. The next
  // overlaps it on the host, but one communication stream runs them one after the other: 4 + 6 ms.
  meter.add(CollectiveKind::reduce_scatter, 8 << 20, ms(0), ms(50), 0.004);
  meter.add(CollectiveKind::reduce_scatter, 8 << 20, ms(10), ms(55), 0.006);
  const loom::telemetry::CommTotals totals = meter.take(2);
  const auto& rs = totals[CollectiveKind::reduce_scatter];
  CHECK(rs.measured_calls == 2);
  CHECK(rs.device_timed_calls == 2);
  CHECK(rs.seconds == Approx(0.010));
  CHECK(totals.bus_bytes_per_second(CollectiveKind::reduce_scatter) == Approx((16 << 20) * 0.5 / 0.010));
}
