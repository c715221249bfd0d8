#include "loom/topo/hierarchical.hpp"

#include <functional>
#include <map>
#include <string>

#include "loom/core/error.hpp"
#include "loom/core/tensor_ops.hpp"
#include "loom/topo/topology_json.hpp"
#include "loom/comm/backend/call_checks.hpp"
#include "loom/comm/backend/call_queue.hpp"
#include "loom/comm/agreement.hpp"

namespace loom::topo {

namespace {

using comm::Communicator;
using comm::ReduceOp;
using comm::Work;

// Throws on every rank unless every rank passes the same value.
void require_same_everywhere(Communicator& flat, std::int64_t value, const std::string& what) {
  const std::vector<std::int64_t> extremes = comm::all_reduce_values(flat, {value, -value}, ReduceOp::max);
  require(extremes[0] == -extremes[1], "topology-aware communicator: ", what, " differs between the ranks; every rank "
          "must use the same topology (set LOOM_TOPO_FILE for all of them, or let detect_topology agree on one)");
}

class TopologyAware : public Communicator {
 public:
  TopologyAware(Communicator& flat, const Topology& topology, AlgorithmChoice choice)
      : flat_(flat), planner_(topology), choice_(choice), queue_("topology-aware collectives", {}) {
    const std::vector<RankPlace> places = topology.placement();
    require(static_cast<int>(places.size()) == flat.size(), "topology-aware communicator: the topology places ",
            places.size(), " ranks but the communicator has ", flat.size());
    // Every decision below is a function of the topology and the choice: agreeing on them makes
    // every rank split, route and order its calls alike.
    require_same_everywhere(flat, static_cast<std::int64_t>(std::hash<std::string>{}(topology_to_json(topology))),
                            "the topology");
    require_same_everywhere(flat, static_cast<std::int64_t>(choice), "the algorithm choice");
    const bool possible = planner_.model().available(Algorithm::hierarchical);
    require(possible || choice != AlgorithmChoice::hierarchical, "topology-aware communicator: hier was asked for, but ",
            "it needs several hosts with the same number (> 1) of ranks each; this job has ", planner_.model().hosts(),
            " host(s) of up to ", planner_.model().ranks_per_host(), " rank(s)");
    active_ = possible && choice != AlgorithmChoice::flat;
    if (!active_) return;  // a plain pass-through: no split communicators
    std::map<int, std::vector<int>> ranks_of_host;
    for (int r = 0; r < flat.size(); ++r) ranks_of_host[places[static_cast<std::size_t>(r)].host].push_back(r);
    // Local index: position in the host's ring order; hosts indexed in order.
    int my_local = 0, my_host_index = 0;
    for (const auto& [h, ranks] : ranks_of_host) {
      const std::vector<int>& order = planner_.ring_orders()[static_cast<std::size_t>(h)];
      std::vector<int> by_local(ranks.size());
      for (std::size_t position = 0; position < order.size(); ++position) {
        by_local[position] = ranks[static_cast<std::size_t>(order[position])];
        if (by_local[position] == flat.rank()) {
          my_local = static_cast<int>(position);
          my_host_index = static_cast<int>(rank_at_.size());
        }
      }
      rank_at_.push_back(by_local);
    }
    intra_ = flat.split(my_host_index, my_local);
    inter_ = flat.split(my_local, my_host_index);
  }

  int rank() const override { return flat_.rank(); }
  int size() const override { return flat_.size(); }
  Device device() const override { return flat_.device(); }
  std::string_view backend() const override { return flat_.backend(); }
  // Active: calls wait for the caller's stream through an event recorded when they are made, and
  // run on the default streams of the underlying communicators.
  Work all_reduce(const Tensor& input, const Tensor& output, ReduceOp op, StreamRef stream) override {
    if (!active_) return flat_.all_reduce(input, output, op, stream);
    if (!hierarchical_for(Collective::all_reduce, input)) {
      return submit("all_reduce", stream, [this, input, output, op] { flat_.all_reduce(input, output, op).wait(); });
    }
    comm::backend::require_reducible(what("all_reduce"), input, output, op, 1, device());
    return submit("all_reduce", stream, [this, input, output, op] { hierarchical_all_reduce(input, output, op); });
  }
  Work reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op, StreamRef stream) override {
    if (!active_) return flat_.reduce_scatter(input, output, op, stream);
    if (!hierarchical_for(Collective::reduce_scatter, input)) {
      return submit("reduce_scatter", stream, [this, input, output, op] { flat_.reduce_scatter(input, output, op).wait(); });
    }
    comm::backend::require_reducible(what("reduce_scatter"), input, output, op, size(), device());
    return submit("reduce_scatter", stream, [this, input, output, op] { hierarchical_reduce_scatter(input, output, op); });
  }
  Work all_gather(const Tensor& input, const Tensor& output, StreamRef stream) override {
    if (!active_) return flat_.all_gather(input, output, stream);
    if (!hierarchical_for(Collective::all_gather, output)) {
      return submit("all_gather", stream, [this, input, output] { flat_.all_gather(input, output).wait(); });
    }
    comm::backend::require_gatherable(what("all_gather"), input, output, size(), device());
    return submit("all_gather", stream, [this, input, output] { hierarchical_all_gather(input, output); });
  }
  // Active, every call goes through the one worker, so that calls complete in the order they were
  // made and every rank issues them to the underlying communicators in the same order.
  Work reduce(const Tensor& input, const Tensor& output, ReduceOp op, int root, StreamRef stream) override {
    if (!active_) return flat_.reduce(input, output, op, root, stream);
    return submit("reduce", stream, [this, input, output, op, root] { flat_.reduce(input, output, op, root).wait(); });
  }
  Work broadcast(const Tensor& tensor, int root, StreamRef stream) override {
    if (!active_) return flat_.broadcast(tensor, root, stream);
    return submit("broadcast", stream, [this, tensor, root] { flat_.broadcast(tensor, root).wait(); });
  }
  Work send(const Tensor& tensor, int peer, StreamRef stream) override {
    if (!active_) return flat_.send(tensor, peer, stream);
    return submit("send", stream, [this, tensor, peer] { flat_.send(tensor, peer).wait(); });
  }
  Work recv(const Tensor& tensor, int peer, StreamRef stream) override {
    if (!active_) return flat_.recv(tensor, peer, stream);
    return submit("recv", stream, [this, tensor, peer] { flat_.recv(tensor, peer).wait(); });
  }
  Work barrier(StreamRef stream) override {
    if (!active_) return flat_.barrier(stream);
    return submit("barrier", stream, [this] { flat_.barrier().wait(); });
  }
  // The split communicators first: a call of this wrapper may wait in either.
  void abort(const std::string& reason) override {
    if (intra_) intra_->abort(reason);
    if (inter_) inter_->abort(reason);
    flat_.abort(reason);
  }
  std::unique_ptr<Communicator> split(int color, int key, std::optional<std::chrono::milliseconds> timeout) override {
    if (!active_) return flat_.split(color, key, timeout);
    std::unique_ptr<Communicator> child;
    queue_.run(what("split"), [&] { child = flat_.split(color, key, timeout); });
    return child;
  }

 private:
  std::string what(const char* op) const {
    return comm::backend::describe_call("topology-aware", op, rank(), size(), device());
  }

  Work submit(const char* op, StreamRef after, std::function<void()> body) {
    auto ready = std::make_shared<Event>(device());
    ready->record(after);  // the caller's work so far, not what it enqueues later
    return queue_.enqueue(what(op), [ready, body = std::move(body)] {
      ready->synchronize();
      body();
    });
  }

  bool hierarchical_for(Collective collective, const Tensor& whole) const {
    if (!whole.defined() || whole.numel() == 0) return false;
    if (choice_ == AlgorithmChoice::hierarchical) return true;
    return planner_.choose(collective, static_cast<std::int64_t>(whole.nbytes())).algorithm == Algorithm::hierarchical;
  }

  // Runs one stage, naming the call and the stage when it fails.
  void stage(const char* call, const char* step, const Work& work) const {
    try {
      work.wait();
    } catch (const Error& e) {
      throw Error(e.category(), loom::detail::concat(what(call), ": ", step, " failed: ", e.detail()), rank());
    }
  }

  int hosts() const { return static_cast<int>(rank_at_.size()); }
  int per_host() const { return static_cast<int>(rank_at_.front().size()); }

  void hierarchical_all_reduce(const Tensor& input, const Tensor& output, ReduceOp op) {
    const std::int64_t count = input.numel(), k = per_host();
    const std::int64_t padded = (count + k - 1) / k * k;
    const Tensor work = Tensor::zeros({padded}, input.dtype(), device());
    copy(work.slice(0, count), input.flatten());
    const Tensor shard = Tensor::empty({padded / k}, input.dtype(), device());
    stage("all_reduce", "intra-host reduce_scatter", intra_->reduce_scatter(work, shard, op));
    stage("all_reduce", "inter-host all_reduce", inter_->all_reduce(shard, shard, op));
    stage("all_reduce", "intra-host all_gather", intra_->all_gather(shard, work));
    copy(output.flatten(), work.slice(0, count));
  }

  void hierarchical_reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op) {
    const std::int64_t c = output.numel();
    const Tensor flat_in = input.flatten();
    // Block (local l, host h) of the packed input is flat rank rank_at_[h][l]'s block.
    const Tensor packed = Tensor::empty({input.numel()}, input.dtype(), device());
    for (int l = 0; l < per_host(); ++l) {
      for (int h = 0; h < hosts(); ++h) {
        const std::int64_t to = (static_cast<std::int64_t>(l) * hosts() + h) * c;
        const std::int64_t from = static_cast<std::int64_t>(rank_at_[static_cast<std::size_t>(h)][static_cast<std::size_t>(l)]) * c;
        copy(packed.slice(to, to + c), flat_in.slice(from, from + c));
      }
    }
    const Tensor mine = Tensor::empty({static_cast<std::int64_t>(hosts()) * c}, input.dtype(), device());
    stage("reduce_scatter", "intra-host reduce_scatter", intra_->reduce_scatter(packed, mine, op));
    stage("reduce_scatter", "inter-host reduce_scatter", inter_->reduce_scatter(mine, output.flatten(), op));
  }

  void hierarchical_all_gather(const Tensor& input, const Tensor& output) {
    const std::int64_t c = input.numel();
    const Tensor across = Tensor::empty({static_cast<std::int64_t>(hosts()) * c}, input.dtype(), device());
    stage("all_gather", "inter-host all_gather", inter_->all_gather(input.flatten(), across));
    const Tensor packed = Tensor::empty({output.numel()}, input.dtype(), device());
    stage("all_gather", "intra-host all_gather", intra_->all_gather(across, packed));
    const Tensor flat_out = output.flatten();
    for (int l = 0; l < per_host(); ++l) {
      for (int h = 0; h < hosts(); ++h) {
        const std::int64_t from = (static_cast<std::int64_t>(l) * hosts() + h) * c;
        const std::int64_t to = static_cast<std::int64_t>(rank_at_[static_cast<std::size_t>(h)][static_cast<std::size_t>(l)]) * c;
        copy(flat_out.slice(to, to + c), packed.slice(from, from + c));
      }
    }
  }

  Communicator& flat_;
  Planner planner_;
  AlgorithmChoice choice_;
  bool active_ = false;
  std::vector<std::vector<int>> rank_at_;  // [host index][local index] -> rank of flat_
  std::unique_ptr<Communicator> intra_, inter_;
  comm::backend::CallQueue queue_;
};

}  // namespace

AlgorithmChoice parse_algorithm_choice(const std::string& name) {
  if (name == "flat") return AlgorithmChoice::flat;
  if (name == "hier") return AlgorithmChoice::hierarchical;
  if (name == "auto") return AlgorithmChoice::automatic;
  fail(ErrorCategory::invalid_argument, "collective algorithm '", name, "' is not flat, hier or auto");
}

std::unique_ptr<comm::Communicator> make_topology_aware(comm::Communicator& flat, const Topology& topology,
                                                        AlgorithmChoice choice) {
  return std::make_unique<TopologyAware>(flat, topology, choice);
}

}  // namespace loom::topo
