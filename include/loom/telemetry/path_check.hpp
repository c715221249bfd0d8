// "A likely wrong path": a data group's collectives achieving far less bus bandwidth than the
// topology's cost model predicts for their link, the complaint of nccl#324, #1843 and #2329. The
// usual causes are NCCL routing through host memory instead of NVLink or P2P (P2P disabled, ACS or
// an IOMMU on a PCIe switch, a container without the NVLink devices), sockets instead of
// InfiniBand, or a NIC on the other socket. NCCL_DEBUG=INFO names the transport it chose.
//
// The check sums a window of steps after a warm-up, since NCCL's first calls set up their
// connections. It judges each collective kind on its own and says so once per kind. It judges
// only calls the backend timed on the device (comm::Completion::device_seconds). A host span also
// holds the wait for the compute stream and, on the CPU, the scheduling of busy cores; judging it
// would raise false alarms (a 2-rank CPU run on 2 cores reads 0.2-0.4 of the model). A device time
// still includes the wait for peers that arrive later, which alone can halve a short bucket's
// figure on a healthy machine. So, given the group, the ranks compare their windows in one small
// all-gather and judge the fastest rank's time: the last rank to arrive waited for no one. Every
// rank of the group then makes the same findings.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "loom/telemetry/comm_meter.hpp"
#include "loom/topo/planner.hpp"

namespace loom::telemetry {

// Sets each collective's predicted_seconds: measured_calls times the planner's prediction for a
// call of their mean size (what the cost model expects of the calls this step made).
void predict(CommTotals& totals, const topo::Planner& planner);

struct PathCheckOptions {
  std::int64_t warmup_steps = 10;  // steps left out at the start
  std::int64_t window_steps = 20;  // steps summed for one verdict
  double threshold = 0.5;          // achieved over predicted below this is "far below"
};

struct PathFinding {
  CollectiveKind kind = CollectiveKind::all_reduce;
  int ranks = 0;
  std::int64_t calls = 0, bytes = 0;  // the window's measured calls
  double achieved_bus_bytes_per_second = 0, predicted_bus_bytes_per_second = 0;
  double ratio() const { return achieved_bus_bytes_per_second / predicted_bus_bytes_per_second; }
};

// "all_reduce achieved 21.4 GB/s of bus bandwidth over 40 calls of 24.0 MiB on 8 ranks, 0.12 of the
// 178.6 GB/s the topology's cost model predicts: a likely wrong path (...)".
std::string describe(const PathFinding& finding);

class PathCheck {
 public:
  // group: the communicator whose collectives are measured, null for one process. Every rank of
  // it must call add() at the same steps (at a window's end it takes part in an all-gather).
  explicit PathCheck(PathCheckOptions options = {}, comm::Communicator* group = nullptr);
  // One step's totals, predictions set (predict()); the findings made at this step, each
  // collective kind at most once per run.
  std::vector<PathFinding> add(const CommTotals& step);

 private:
  PathCheckOptions options_;
  comm::Communicator* group_;
  std::int64_t steps_ = 0;
  CommTotals window_;
  std::array<bool, collective_kinds> unpredicted_{};  // a step of the window had calls but no prediction
  std::array<bool, collective_kinds> reported_{};
};

}  // namespace loom::telemetry
