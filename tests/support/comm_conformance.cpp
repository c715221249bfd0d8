#include "support/comm_conformance.hpp"

#include <algorithm>
#include <sstream>

#include "loom/core/error.hpp"
#include "loom/core/tensor_ops.hpp"

namespace loom::test {

using comm::Communicator;
using comm::ReduceOp;

double contribution(int rank, std::int64_t i) { return (rank + 1) * static_cast<double>(i % 5 + 1); }

Tensor exact_values(DType dtype, std::int64_t n, int rank, Device device) {
  std::vector<double> values(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) values[static_cast<std::size_t>(i)] = contribution(rank, i);
  return from_doubles(values, dtype, device);
}

namespace {

// op over ranks [0, size) of contribution(r, i), or over the ranks listed.
double reduced(ReduceOp op, const std::vector<int>& ranks, std::int64_t i) {
  double acc = contribution(ranks.front(), i);
  for (std::size_t k = 1; k < ranks.size(); ++k) {
    const double v = contribution(ranks[k], i);
    if (op == ReduceOp::max) acc = std::max(acc, v);
    else if (op == ReduceOp::min) acc = std::min(acc, v);
    else acc += v;
  }
  return op == ReduceOp::avg ? acc / static_cast<double>(ranks.size()) : acc;
}

std::vector<int> all_ranks(int size) {
  std::vector<int> out;
  for (int r = 0; r < size; ++r) out.push_back(r);
  return out;
}

class Suite {
 public:
  explicit Suite(Communicator& comm) : comm_(comm), rank_(comm.rank()), size_(comm.size()), device_(comm.device()) {}

  std::string failure() const { return failure_; }

  // Compares elements [offset, offset + n) of got (on any device) with want(i); records the first difference.
  template <class Want>
  void expect(const Tensor& got, std::int64_t offset, std::int64_t n, Want want, const std::string& what) {
    if (!failure_.empty()) return;
    const std::vector<double> values = to_doubles(got);
    for (std::int64_t i = 0; i < n; ++i) {
      const double value = values[static_cast<std::size_t>(offset + i)], expected = want(i);
      if (value != expected) {
        failure_ = detail::concat("rank ", rank_, " of ", size_, " (", comm_.backend(), "): ", what, ": element ", i,
                                  " is ", value, ", expected ", expected);
        return;
      }
    }
  }

  Tensor values(DType dtype, std::int64_t n) const { return exact_values(dtype, n, rank_, device_); }
  Tensor poison(DType dtype, std::int64_t n) const { return Tensor::full({n}, dtype, -7, device_); }

  void reductions(DType dtype, std::int64_t n, ReduceOp op) {
    const std::string tag = detail::concat(dtype, " n=", n, " ", comm::to_string(op));
    const std::vector<int> everyone = all_ranks(size_);
    auto whole = [&](std::int64_t i) { return reduced(op, everyone, i); };

    const Tensor out = poison(dtype, n);
    comm_.all_reduce(values(dtype, n), out, op).wait();
    expect(out, 0, n, whole, "all_reduce " + tag);
    const Tensor in_place = values(dtype, n);
    comm_.all_reduce(in_place, in_place, op).wait();
    expect(in_place, 0, n, whole, "all_reduce in place " + tag);

    for (int root = 0; root < size_; ++root) {
      const bool is_root = rank_ == root;
      const Tensor result = is_root ? poison(dtype, n) : Tensor();
      comm_.reduce(values(dtype, n), result, op, root).wait();
      if (is_root) expect(result, 0, n, whole, detail::concat("reduce to root ", root, " ", tag));
      const Tensor inplace = values(dtype, n);
      comm_.reduce(inplace, inplace, op, root).wait();
      if (is_root) expect(inplace, 0, n, whole, detail::concat("reduce in place to root ", root, " ", tag));
      else expect(inplace, 0, n, [&](std::int64_t i) { return contribution(rank_, i); }, "reduce leaves non-root input " + tag);
    }

    // reduce_scatter: size blocks of n elements; this rank gets block rank_.
    auto block = [&](std::int64_t i) { return reduced(op, everyone, rank_ * n + i); };
    const Tensor mine = poison(dtype, n);
    comm_.reduce_scatter(values(dtype, n * size_), mine, op).wait();
    expect(mine, 0, n, block, "reduce_scatter " + tag);
    const Tensor blocks = values(dtype, n * size_);
    comm_.reduce_scatter(blocks, blocks.slice(rank_ * n, (rank_ + 1) * n), op).wait();
    expect(blocks, rank_ * n, n, block, "reduce_scatter in place " + tag);
  }

  void movements(DType dtype, std::int64_t n) {
    const std::string tag = detail::concat(dtype, " n=", n);
    for (int root = 0; root < size_; ++root) {
      const Tensor t = values(dtype, n);
      comm_.broadcast(t, root).wait();
      expect(t, 0, n, [&](std::int64_t i) { return contribution(root, i); }, detail::concat("broadcast from ", root, " ", tag));
    }
    const Tensor gathered = poison(dtype, n * size_);
    comm_.all_gather(values(dtype, n), gathered).wait();
    const Tensor in_place = poison(dtype, n * size_);
    copy(in_place.slice(rank_ * n, (rank_ + 1) * n), values(dtype, n));
    comm_.all_gather(in_place.slice(rank_ * n, (rank_ + 1) * n), in_place).wait();
    for (int q = 0; q < size_; ++q) {
      auto theirs = [&](std::int64_t i) { return contribution(q, i); };
      expect(gathered, q * n, n, theirs, detail::concat("all_gather block ", q, " ", tag));
      expect(in_place, q * n, n, theirs, detail::concat("all_gather in place block ", q, " ", tag));
    }
    if (size_ < 2) return;
    // Ring: each rank sends to the next and receives from the previous; even ranks send first.
    const int next = (rank_ + 1) % size_, previous = (rank_ + size_ - 1) % size_;
    const Tensor outgoing = values(dtype, n), incoming = poison(dtype, n);
    if (rank_ % 2 == 0) {
      comm_.send(outgoing, next).wait();
      comm_.recv(incoming, previous).wait();
    } else {
      comm_.recv(incoming, previous).wait();
      comm_.send(outgoing, next).wait();
    }
    expect(incoming, 0, n, [&](std::int64_t i) { return contribution(previous, i); }, "recv from the previous rank " + tag);
  }

  // Even and odd ranks form two communicators, keys reversed; odd ranks of a world of 3+ also
  // test no_color by leaving out the last rank.
  void splits() {
    const bool left_out = size_ >= 3 && rank_ == size_ - 1;
    const int color = left_out ? Communicator::no_color : rank_ % 2;
    std::unique_ptr<Communicator> child = comm_.split(color, size_ - rank_);
    if (left_out) {
      if (child && failure_.empty()) failure_ = detail::concat("rank ", rank_, ": split with no_color returned a communicator");
      return;
    }
    std::vector<int> members;
    for (int r = size_ - 1; r >= 0; --r) {
      if (r % 2 == rank_ % 2 && !(size_ >= 3 && r == size_ - 1)) members.push_back(r);
    }
    if (!child || child->size() != static_cast<int>(members.size()) || members[static_cast<std::size_t>(child->rank())] != rank_) {
      if (failure_.empty()) {
        failure_ = detail::concat("rank ", rank_, ": split gave ", child ? child->size() : 0, " ranks (rank ",
                                  child ? child->rank() : -1, "), expected ", members.size());
      }
      return;
    }
    const Tensor t = values(DType::f32, 9);
    child->all_reduce(t, t, ReduceOp::sum).wait();
    expect(t, 0, 9, [&](std::int64_t i) { return reduced(ReduceOp::sum, members, i); }, "all_reduce on a split communicator");
  }

 private:
  Communicator& comm_;
  int rank_, size_;
  Device device_;
  std::string failure_;
};

}  // namespace

std::string run_comm_conformance(Communicator& comm, const ConformanceSizes& sizes) {
  Suite suite(comm);
  const DType dtypes[] = {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64};
  const ReduceOp ops[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min};
  for (DType dtype : dtypes) {
    for (std::int64_t n : sizes.small) {
      for (ReduceOp op : ops) {
        if (op != ReduceOp::avg || is_floating_point(dtype)) suite.reductions(dtype, n, op);
      }
      suite.movements(dtype, n);
    }
    if (sizes.large > 0) {
      suite.reductions(dtype, sizes.large, ReduceOp::sum);
      suite.movements(dtype, sizes.large);
    }
  }
  suite.splits();
  comm.barrier().wait();
  return suite.failure();
}

}  // namespace loom::test
