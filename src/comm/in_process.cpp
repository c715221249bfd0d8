#include "loom/comm/in_process.hpp"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "loom/core/error.hpp"
#include "loom/comm/backend/call_checks.hpp"
#include "loom/comm/backend/call_queue.hpp"
#include "src/comm/checked.hpp"
#include "src/comm/reduce.hpp"

namespace loom::comm {

namespace {

struct Post {
  const void* input = nullptr;
  int color = 0, key = 0;
  std::shared_ptr<void> shared{};  // split: the new group, created by its first member
};

// A message from a send waiting for its recv.
struct Letter {
  const void* data;
  DType dtype;
  std::int64_t numel;
  bool taken = false;
  std::string refusal{};  // set by a recv that does not match
};

// What the ranks of one group share. A collective round waits until every rank has arrived, then
// every rank sees all posts. A round or a send/recv that its peers do not join in time aborts the
// group: the waiting ranks and every later call fail.
class Group {
 public:
  Group(int size, std::chrono::milliseconds timeout) : size_(size), timeout_(timeout), posts_(size) {}

  int size() const { return size_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  std::vector<Post> arrive(int rank, Post post, const std::string& what) {
    std::unique_lock lock(mutex_);
    check_not_aborted(what);
    const std::int64_t round = round_;
    posts_[static_cast<std::size_t>(rank)] = std::move(post);
    if (++arrived_ == size_) {
      snapshot_ = posts_;
      arrived_ = 0;
      ++round_;
      changed_.notify_all();
      return snapshot_;
    }
    if (!changed_.wait_for(lock, timeout_, [&] { return round_ != round || aborted_; })) {
      abort_locked();
      fail(ErrorCategory::timeout, what, ": only ", arrived_, " of ", size_, " ranks joined within ", timeout_.count(),
           " ms; the communicator is aborted");
    }
    if (round_ == round) fail(abort_category_, what, ": aborted by ", why());
    return snapshot_;
  }

  void send(int from, int to, const Tensor& tensor, const std::string& what) {
    std::unique_lock lock(mutex_);
    check_not_aborted(what);
    Letter letter{tensor.raw_data(), tensor.dtype(), tensor.numel()};
    std::deque<Letter*>& box = mailbox_[{from, to}];
    box.push_back(&letter);
    changed_.notify_all();
    if (!changed_.wait_for(lock, timeout_, [&] { return letter.taken || aborted_; })) {
      std::erase(box, &letter);
      abort_locked();
      fail(ErrorCategory::timeout, what, ": rank ", to, " did not receive within ", timeout_.count(),
           " ms; the communicator is aborted");
    }
    if (!letter.taken) {
      std::erase(box, &letter);
      fail(abort_category_, what, ": aborted by ", why());
    }
    if (!letter.refusal.empty()) fail(ErrorCategory::invalid_argument, what, ": ", letter.refusal);
  }

  void recv(int from, int to, const Tensor& tensor, const std::string& what) {
    std::unique_lock lock(mutex_);
    check_not_aborted(what);
    std::deque<Letter*>& box = mailbox_[{from, to}];
    if (!changed_.wait_for(lock, timeout_, [&] { return !box.empty() || aborted_; })) {
      abort_locked();
      fail(ErrorCategory::timeout, what, ": rank ", from, " did not send within ", timeout_.count(),
           " ms; the communicator is aborted");
    }
    if (box.empty()) fail(abort_category_, what, ": aborted by ", why());
    Letter& letter = *box.front();
    box.pop_front();
    letter.taken = true;
    changed_.notify_all();
    if (letter.dtype != tensor.dtype() || letter.numel != tensor.numel()) {
      letter.refusal = loom::detail::concat("rank ", from, " sent ", letter.numel, " ", letter.dtype, " elements but rank ",
                                            to, " receives ", tensor.numel(), " ", tensor.dtype());
      fail(ErrorCategory::invalid_argument, what, ": ", letter.refusal);
    }
    if (tensor.nbytes() > 0) std::memcpy(tensor.raw_data(), letter.data, tensor.nbytes());
  }

  // A rank that cannot go on: every waiting and later call of the group fails with its reason.
  void abort(int rank, const std::string& reason) {
    const std::lock_guard lock(mutex_);
    if (aborted_) return;
    abort_category_ = ErrorCategory::aborted;
    reason_ = loom::detail::concat("rank ", rank, ": ", reason);
    abort_locked();
  }

 private:
  void check_not_aborted(const std::string& what) const {
    if (aborted_) fail(abort_category_, what, ": the in-process communicator was aborted by ", why());
  }
  std::string why() const { return reason_.empty() ? std::string("another rank's timeout") : reason_; }
  void abort_locked() {
    aborted_ = true;
    changed_.notify_all();
  }

  ErrorCategory abort_category_ = ErrorCategory::timeout;
  std::string reason_;  // set by abort(); empty: a timeout

  std::mutex mutex_;
  std::condition_variable changed_;
  int size_;
  std::chrono::milliseconds timeout_;
  int arrived_ = 0;
  std::int64_t round_ = 0;
  bool aborted_ = false;
  std::vector<Post> posts_, snapshot_;
  std::map<std::pair<int, int>, std::deque<Letter*>> mailbox_;
};

class InProcessCommunicator : public Communicator {
 public:
  InProcessCommunicator(std::shared_ptr<Group> group, int rank)
      : group_(std::move(group)), rank_(rank), calls_("in-process communicator", std::chrono::milliseconds(0)) {}

  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  Device device() const override { return Device::cpu(); }
  std::string_view backend() const override { return "in-process"; }

  Work all_reduce(const Tensor& input, const Tensor& output, ReduceOp op, StreamRef) override {
    const std::string what = describe("all_reduce");
    backend::require_reducible(what, input, output, op, 1, Device::cpu());
    return calls_.enqueue(what, [=, this] { reduce_to(input, output, op, 0, input.numel(), what); });
  }

  Work reduce(const Tensor& input, const Tensor& output, ReduceOp op, int root, StreamRef) override {
    const std::string what = describe("reduce");
    backend::require_root(what, root, size());
    backend::require_reducible(what, input, rank_ == root ? output : input, op, 1, Device::cpu());
    return calls_.enqueue(what, [=, this] {
      reduce_to(input, rank_ == root ? output : Tensor(), op, 0, input.numel(), what);
    });
  }

  Work reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op, StreamRef) override {
    const std::string what = describe("reduce_scatter");
    backend::require_reducible(what, input, output, op, size(), Device::cpu());
    return calls_.enqueue(what, [=, this] { reduce_to(input, output, op, rank_ * output.numel(), output.numel(), what); });
  }

  Work broadcast(const Tensor& tensor, int root, StreamRef) override {
    const std::string what = describe("broadcast");
    backend::require_root(what, root, size());
    backend::require_on_device(what, "tensor", tensor, Device::cpu());
    return calls_.enqueue(what, [=, this] {
      const std::vector<Post> posts = group_->arrive(rank_, {tensor.raw_data()}, what);
      if (rank_ != root && tensor.nbytes() > 0) {
        std::memcpy(tensor.raw_data(), posts[static_cast<std::size_t>(root)].input, tensor.nbytes());
      }
      group_->arrive(rank_, {}, what);
    });
  }

  Work all_gather(const Tensor& input, const Tensor& output, StreamRef) override {
    const std::string what = describe("all_gather");
    backend::require_gatherable(what, input, output, size(), Device::cpu());
    return calls_.enqueue(what, [=, this] {
      const std::vector<Post> posts = group_->arrive(rank_, {input.raw_data()}, what);
      auto* out = static_cast<unsigned char*>(output.raw_data());
      for (int r = 0; r < size(); ++r) {
        unsigned char* block = out + static_cast<std::size_t>(r) * input.nbytes();
        const void* source = posts[static_cast<std::size_t>(r)].input;
        if (input.nbytes() > 0 && block != source) std::memmove(block, source, input.nbytes());
      }
      group_->arrive(rank_, {}, what);
    });
  }

  Work send(const Tensor& tensor, int peer, StreamRef) override {
    const std::string what = describe("send", peer);
    backend::require_peer(what, tensor, peer, rank_, size(), Device::cpu());
    return calls_.enqueue(what, [=, this] { group_->send(rank_, peer, tensor, what); });
  }

  Work recv(const Tensor& tensor, int peer, StreamRef) override {
    const std::string what = describe("recv", peer);
    backend::require_peer(what, tensor, peer, rank_, size(), Device::cpu());
    return calls_.enqueue(what, [=, this] { group_->recv(peer, rank_, tensor, what); });
  }

  Work barrier(StreamRef) override {
    const std::string what = describe("barrier");
    return calls_.enqueue(what, [=, this] { group_->arrive(rank_, {}, what); });
  }

  void abort(const std::string& reason) override { group_->abort(rank_, reason); }

  std::unique_ptr<Communicator> split(int color, int key, std::optional<std::chrono::milliseconds> timeout) override {
    const std::string what = describe("split");
    backend::require_color(what, color);
    backend::require_split_timeout(what, timeout);
    std::unique_ptr<Communicator> child;
    calls_.run(what, [&] {
      std::vector<Post> posts = group_->arrive(rank_, {nullptr, color, key, nullptr}, what);
      // Members of this rank's color, ordered by (key, old rank); the first creates the group.
      std::vector<int> members;
      for (int r = 0; r < size(); ++r) {
        if (color != no_color && posts[static_cast<std::size_t>(r)].color == color) members.push_back(r);
      }
      std::stable_sort(members.begin(), members.end(), [&](int a, int b) {
        return posts[static_cast<std::size_t>(a)].key < posts[static_cast<std::size_t>(b)].key;
      });
      std::shared_ptr<void> created;
      if (!members.empty() && members.front() == rank_) {
        created = std::make_shared<Group>(static_cast<int>(members.size()), timeout.value_or(group_->timeout()));
      }
      posts = group_->arrive(rank_, {nullptr, 0, 0, created}, what);
      if (members.empty()) return;
      const auto new_rank = static_cast<int>(std::find(members.begin(), members.end(), rank_) - members.begin());
      child = std::make_unique<InProcessCommunicator>(
          std::static_pointer_cast<Group>(posts[static_cast<std::size_t>(members.front())].shared), new_rank);
    });
    return child;
  }

 private:
  std::string describe(const char* op, int peer = -1) const {
    return backend::describe_call("in-process", op, rank_, size(), Device::cpu(), peer);
  }

  // output (when defined) = elements [offset, offset + count) of op over the ranks' inputs.
  void reduce_to(const Tensor& input, const Tensor& output, ReduceOp op, std::int64_t offset, std::int64_t count,
                 const std::string& what) {
    const std::vector<Post> posts = group_->arrive(rank_, {input.raw_data()}, what);
    std::vector<const void*> inputs;
    for (const Post& p : posts) inputs.push_back(p.input);
    std::vector<unsigned char> result(output.defined() ? output.nbytes() : 0);
    if (output.defined()) detail::reduce_into(result.data(), inputs, offset, count, input.dtype(), op);
    group_->arrive(rank_, {}, what);  // every rank has read the inputs: outputs may overwrite them
    if (!result.empty()) std::memcpy(output.raw_data(), result.data(), result.size());
  }

  std::shared_ptr<Group> group_;
  int rank_;
  backend::CallQueue calls_;  // last: its worker stops before the rest is destroyed
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_in_process_communicators(int size, const CommOptions& options) {
  require(size >= 1, "in-process communicators: size must be >= 1, got ", size);
  require(options.timeout.count() > 0, "in-process communicators: the timeout must be positive");
  auto group = std::make_shared<Group>(size, options.timeout);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < size; ++r) {
    std::unique_ptr<Communicator> comm = std::make_unique<InProcessCommunicator>(group, r);
    out.push_back(options.check_collectives ? detail::with_collective_checks(std::move(comm)) : std::move(comm));
  }
  return out;
}

void run_in_process(int size, const std::function<void(Communicator&)>& body, const CommOptions& options) {
  std::vector<std::unique_ptr<Communicator>> comms = make_in_process_communicators(size, options);
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(size));
  {
    std::vector<std::jthread> threads;
    for (int r = 0; r < size; ++r) {
      threads.emplace_back([&, r] {
        try {
          body(*comms[static_cast<std::size_t>(r)]);
        } catch (...) {
          errors[static_cast<std::size_t>(r)] = std::current_exception();
        }
      });
    }
  }
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace loom::comm
