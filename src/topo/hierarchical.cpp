#include "loom/topo/hierarchical.hpp"

#include <map>
#include <string>

#include "loom/core/error.hpp"
#include "loom/core/tensor_ops.hpp"
#include "src/comm/call_checks.hpp"
#include "src/comm/call_queue.hpp"

namespace loom::topo {

namespace {

using comm::Communicator;
using comm::ReduceOp;
using comm::Work;

class TopologyAware : public Communicator {
 public:
  TopologyAware(Communicator& flat, const Topology& topology, AlgorithmChoice choice)
      : flat_(flat), planner_(topology), choice_(choice), queue_("hierarchical collectives", {}) {
    const std::vector<RankPlace> places = topology.placement();
    require(static_cast<int>(places.size()) == flat.size(), "topology-aware communicator: the topology places ",
            places.size(), " ranks but the communicator has ", flat.size());
    std::map<int, std::vector<int>> ranks_of_host;
    for (int r = 0; r < flat.size(); ++r) ranks_of_host[places[static_cast<std::size_t>(r)].host].push_back(r);
    const int my_host = places[static_cast<std::size_t>(flat.rank())].host;
    uniform_ = ranks_of_host.size() > 1;
    for (const auto& [h, ranks] : ranks_of_host) uniform_ = uniform_ && ranks.size() == ranks_of_host.begin()->second.size();
    uniform_ = uniform_ && ranks_of_host.begin()->second.size() > 1;
    // Local index: position in the host's ring order; hosts indexed in order of appearance.
    const auto& orders = planner_.ring_orders();
    int host_index = 0, my_local = 0, my_host_index = 0;
    for (const auto& [h, ranks] : ranks_of_host) {
      const std::vector<int>& order = orders[static_cast<std::size_t>(h)];
      std::vector<int> by_local(ranks.size());
      for (std::size_t position = 0; position < order.size(); ++position) {
        by_local[position] = ranks[static_cast<std::size_t>(order[position])];
        if (h == my_host && by_local[position] == flat.rank()) my_local = static_cast<int>(position);
      }
      if (h == my_host) my_host_index = host_index;
      rank_at_.push_back(by_local);
      ++host_index;
    }
    // Every rank splits (collective), also when the schedule cannot be used.
    intra_ = flat.split(my_host_index, my_local);
    inter_ = flat.split(my_local, my_host_index);
  }

  int rank() const override { return flat_.rank(); }
  int size() const override { return flat_.size(); }
  Device device() const override { return flat_.device(); }
  std::string_view backend() const override { return flat_.backend(); }
  void set_stream(StreamRef stream) override {
    stream_ = stream;
    flat_.set_stream(stream);
    intra_->set_stream(stream);
    inter_->set_stream(stream);
  }

  Work all_reduce(const Tensor& input, const Tensor& output, ReduceOp op) override {
    if (!use_hierarchy(Collective::all_reduce, input)) return flat_.all_reduce(input, output, op);
    comm::detail::require_reducible(what("all_reduce"), input, output, op, 1, device());
    return queue_.enqueue(what("all_reduce"), [this, input, output, op] { hierarchical_all_reduce(input, output, op); });
  }
  Work reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op) override {
    if (!use_hierarchy(Collective::reduce_scatter, input)) return flat_.reduce_scatter(input, output, op);
    comm::detail::require_reducible(what("reduce_scatter"), input, output, op, size(), device());
    return queue_.enqueue(what("reduce_scatter"), [this, input, output, op] { hierarchical_reduce_scatter(input, output, op); });
  }
  Work all_gather(const Tensor& input, const Tensor& output) override {
    if (!use_hierarchy(Collective::all_gather, output)) return flat_.all_gather(input, output);
    comm::detail::require_gatherable(what("all_gather"), input, output, size(), device());
    return queue_.enqueue(what("all_gather"), [this, input, output] { hierarchical_all_gather(input, output); });
  }
  Work reduce(const Tensor& input, const Tensor& output, ReduceOp op, int root) override {
    return flat_.reduce(input, output, op, root);
  }
  Work broadcast(const Tensor& tensor, int root) override { return flat_.broadcast(tensor, root); }
  Work send(const Tensor& tensor, int peer) override { return flat_.send(tensor, peer); }
  Work recv(const Tensor& tensor, int peer) override { return flat_.recv(tensor, peer); }
  Work barrier() override { return flat_.barrier(); }
  std::unique_ptr<Communicator> split(int color, int key) override { return flat_.split(color, key); }

 private:
  std::string what(const char* op) const {
    return comm::detail::describe_call("hierarchical", op, rank(), size(), device());
  }

  // The schedule for this call: never across a flat call still queued before it (order is kept
  // by sending every call of a kind the same way for a given size, on every rank alike).
  bool use_hierarchy(Collective collective, const Tensor& whole) const {
    if (!uniform_ || choice_ == AlgorithmChoice::flat || !whole.defined() || whole.numel() == 0) return false;
    if (choice_ == AlgorithmChoice::hierarchical) return true;
    const auto bytes = static_cast<std::int64_t>(whole.nbytes());
    return planner_.choose(collective, bytes).algorithm == Algorithm::hierarchical;
  }

  int hosts() const { return static_cast<int>(rank_at_.size()); }
  int per_host() const { return static_cast<int>(rank_at_.front().size()); }

  void hierarchical_all_reduce(const Tensor& input, const Tensor& output, ReduceOp op) {
    loom::synchronize(stream_);  // the caller's work on the input (the copies below use the default stream)
    const std::int64_t count = input.numel(), k = per_host();
    const std::int64_t padded = (count + k - 1) / k * k;
    const Tensor work = Tensor::zeros({padded}, input.dtype(), device());
    copy(work.slice(0, count), input.flatten());
    const Tensor shard = Tensor::empty({padded / k}, input.dtype(), device());
    intra_->reduce_scatter(work, shard, op).wait();
    inter_->all_reduce(shard, shard, op).wait();
    intra_->all_gather(shard, work).wait();
    copy(output.flatten(), work.slice(0, count));
  }

  void hierarchical_reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op) {
    loom::synchronize(stream_);  // the caller's work on the input (the copies below use the default stream)
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
    intra_->reduce_scatter(packed, mine, op).wait();
    inter_->reduce_scatter(mine, output.flatten(), op).wait();
  }

  void hierarchical_all_gather(const Tensor& input, const Tensor& output) {
    loom::synchronize(stream_);  // the caller's work on the input (the copies below use the default stream)
    const std::int64_t c = input.numel();
    const Tensor across = Tensor::empty({static_cast<std::int64_t>(hosts()) * c}, input.dtype(), device());
    inter_->all_gather(input.flatten(), across).wait();
    const Tensor packed = Tensor::empty({output.numel()}, input.dtype(), device());
    intra_->all_gather(across, packed).wait();
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
  bool uniform_ = false;
  std::vector<std::vector<int>> rank_at_;  // [host index][local index] -> rank of flat_
  std::unique_ptr<Communicator> intra_, inter_;
  StreamRef stream_;
  comm::detail::CallQueue queue_;
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
