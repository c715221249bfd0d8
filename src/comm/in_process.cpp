#include "loom/comm/in_process.hpp"

#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

#include "loom/core/error.hpp"
#include "src/comm/reduce.hpp"

namespace loom::comm {

namespace {

struct Post {
  const void* input = nullptr;
};

// Every rank of a round waits here until all have arrived, then sees all posts. A round that not
// every rank joins in time aborts the group: the waiting ranks and every later call fail.
class Rendezvous {
 public:
  Rendezvous(int size, std::chrono::milliseconds timeout) : size_(size), timeout_(timeout), posts_(size) {}

  std::vector<Post> arrive(int rank, Post post, const std::string& what) {
    std::unique_lock lock(mutex_);
    if (aborted_) fail(ErrorCategory::timeout, what, ": the in-process communicator was aborted by an earlier timeout");
    const std::int64_t round = round_;
    posts_[static_cast<std::size_t>(rank)] = post;
    if (++arrived_ == size_) {
      snapshot_ = posts_;
      arrived_ = 0;
      ++round_;
      changed_.notify_all();
      return snapshot_;
    }
    if (!changed_.wait_for(lock, timeout_, [&] { return round_ != round || aborted_; })) {
      aborted_ = true;
      const int present = arrived_;
      changed_.notify_all();
      fail(ErrorCategory::timeout, what, ": only ", present, " of ", size_, " ranks joined within ", timeout_.count(),
           " ms; the communicator is aborted");
    }
    if (round_ == round) fail(ErrorCategory::timeout, what, ": aborted by another rank's timeout");
    return snapshot_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  int size_;
  std::chrono::milliseconds timeout_;
  int arrived_ = 0;
  std::int64_t round_ = 0;
  bool aborted_ = false;
  std::vector<Post> posts_, snapshot_;
};

class InProcessCommunicator : public Communicator {
 public:
  InProcessCommunicator(std::shared_ptr<Rendezvous> group, int rank, int size)
      : group_(std::move(group)), rank_(rank), size_(size), worker_([this] { run(); }) {}

  ~InProcessCommunicator() override {
    {
      const std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    queued_.notify_one();
    worker_.join();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Work all_reduce(const Tensor& input, const Tensor& output, ReduceOp op) override {
    const std::string what = describe("all_reduce");
    detail::require_reducible(what, input, output, op, 1);
    return enqueue(what, [=, this] {
      const std::vector<Post> posts = group_->arrive(rank_, {input.raw_data()}, what);
      const std::vector<const void*> inputs = inputs_of(posts);
      std::vector<unsigned char> result(input.nbytes());
      detail::reduce_into(result.data(), inputs, 0, input.numel(), input.dtype(), op);
      group_->arrive(rank_, {}, what);  // every rank has read the inputs: outputs may overwrite them
      if (!result.empty()) std::memcpy(output.raw_data(), result.data(), result.size());
    });
  }

  Work broadcast(const Tensor& tensor, int root) override {
    const std::string what = describe("broadcast");
    require(root >= 0 && root < size_, what, ": root ", root, " is outside a world of ", size_);
    detail::require_cpu_contiguous(what, "tensor", tensor);
    return enqueue(what, [=, this] {
      const std::vector<Post> posts = group_->arrive(rank_, {tensor.raw_data()}, what);
      if (rank_ != root && tensor.nbytes() > 0) {
        std::memcpy(tensor.raw_data(), posts[static_cast<std::size_t>(root)].input, tensor.nbytes());
      }
      group_->arrive(rank_, {}, what);
    });
  }

  Work all_gather(const Tensor& input, const Tensor& output) override {
    const std::string what = describe("all_gather");
    detail::require_cpu_contiguous(what, "input", input);
    detail::require_cpu_contiguous(what, "output", output);
    require(input.dtype() == output.dtype() && output.numel() == input.numel() * size_, what, ": output must be ",
            size_, " x the input's ", input.numel(), " ", input.dtype(), " elements, got ", output);
    return enqueue(what, [=, this] {
      const std::vector<Post> posts = group_->arrive(rank_, {input.raw_data()}, what);
      auto* out = static_cast<unsigned char*>(output.raw_data());
      for (int r = 0; r < size_; ++r) {
        unsigned char* block = out + static_cast<std::size_t>(r) * input.nbytes();
        const void* source = posts[static_cast<std::size_t>(r)].input;
        if (input.nbytes() > 0 && block != source) std::memcpy(block, source, input.nbytes());
      }
      group_->arrive(rank_, {}, what);
    });
  }

  Work reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op) override {
    const std::string what = describe("reduce_scatter");
    detail::require_reducible(what, input, output, op, size_);
    return enqueue(what, [=, this] {
      const std::vector<Post> posts = group_->arrive(rank_, {input.raw_data()}, what);
      std::vector<unsigned char> result(output.nbytes());
      detail::reduce_into(result.data(), inputs_of(posts), rank_ * output.numel(), output.numel(), input.dtype(), op);
      group_->arrive(rank_, {}, what);
      if (!result.empty()) std::memcpy(output.raw_data(), result.data(), result.size());
    });
  }

  Work barrier() override {
    const std::string what = describe("barrier");
    return enqueue(what, [=, this] { group_->arrive(rank_, {}, what); });
  }

 private:
  std::string describe(const char* op) const {
    return std::string("in-process ") + op + " (rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ")";
  }

  static std::vector<const void*> inputs_of(const std::vector<Post>& posts) {
    std::vector<const void*> inputs;
    for (const Post& p : posts) inputs.push_back(p.input);
    return inputs;
  }

  Work enqueue(const std::string& what, std::function<void()> op) {
    auto state = std::make_shared<detail::WorkState>();
    state->what = what;
    {
      const std::lock_guard lock(mutex_);
      queue_.push_back({state, std::move(op)});
    }
    queued_.notify_one();
    return Work(state);
  }

  void run() {
    for (;;) {
      std::pair<std::shared_ptr<detail::WorkState>, std::function<void()>> item;
      {
        std::unique_lock lock(mutex_);
        queued_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, and everything asked for is done
        item = std::move(queue_.front());
        queue_.pop_front();
      }
      std::exception_ptr failure;
      try {
        item.second();
      } catch (...) {
        failure = std::current_exception();
      }
      item.second = nullptr;  // release the call's captures before the caller learns it is done
      item.first->complete(failure);
    }
  }

  std::shared_ptr<Rendezvous> group_;
  int rank_, size_;
  std::mutex mutex_;
  std::condition_variable queued_;
  std::deque<std::pair<std::shared_ptr<detail::WorkState>, std::function<void()>>> queue_;
  bool stopping_ = false;
  std::thread worker_;  // last: started once everything it uses exists
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_in_process_communicators(int size, const CommOptions& options) {
  require(size >= 1, "in-process communicators: size must be >= 1, got ", size);
  require(options.timeout.count() > 0, "in-process communicators: the timeout must be positive");
  auto group = std::make_shared<Rendezvous>(size, options.timeout);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < size; ++r) out.push_back(std::make_unique<InProcessCommunicator>(group, r, size));
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
