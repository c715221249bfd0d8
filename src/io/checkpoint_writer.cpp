#include "loom/io/checkpoint_writer.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <exception>
#include <system_error>
#include <thread>
#include <utility>

#include "loom/comm/agreement.hpp"
#include "loom/core/allocator.hpp"
#include "loom/core/error.hpp"
#include "loom/core/tensor_ops.hpp"
#include "src/io/sharded_checkpoint.hpp"

namespace loom::io {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

// A background save: its thread, and what it leaves behind for the caller.
struct CheckpointWriter::Flight {
  std::thread thread;
  std::atomic<bool> done{false};
  SaveReport report;
  std::exception_ptr error;
};

CheckpointWriter::CheckpointWriter(const model::Model& model, const optim::Optimizer& optimizer,
                                   comm::Communicator* comm, CheckpointWriterOptions options)
    : model_(model), optimizer_(optimizer), comm_(comm), options_(options) {
  require(options_.min_write_bytes_per_second > 0 && std::isfinite(options_.min_write_bytes_per_second),
          "checkpoint writer: min_write_bytes_per_second must be positive, got ", options_.min_write_bytes_per_second);
  require(options_.commit_slack.count() > 0, "checkpoint writer: commit_slack must be positive, got ",
          options_.commit_slack.count(), " ms");
  require(options_.max_write_bytes_per_second >= 0 && std::isfinite(options_.max_write_bytes_per_second),
          "checkpoint writer: max_write_bytes_per_second must be >= 0 (0: no limit), got ",
          options_.max_write_bytes_per_second);
  require(comm_ != nullptr ||
              (!optimizer.sharded() && model.parameter_space().value_mode() == model::ValueMode::full),
          "checkpoint writer: the model or optimizer holds one rank's shard; pass the job's communicator (every rank)");
  // (agreed: a rank whose place is wrong must not leave the others in the all-reduce below)
  bytes_ = detail::agreed_sharded_save(model_, optimizer_, {}, comm_).data_bytes();
  // This rank's write at the slowest rate expected (a rate limit below it is slower still); the
  // job's deadline is the longest of the ranks'.
  double rate = options_.min_write_bytes_per_second;
  if (options_.max_write_bytes_per_second > 0) rate = std::min(rate, options_.max_write_bytes_per_second);
  deadline_ = options_.commit_slack +
              std::chrono::milliseconds(static_cast<std::int64_t>(std::ceil(1e3 * static_cast<double>(bytes_) / rate)));
  if (comm_ != nullptr) {
    deadline_ = std::chrono::milliseconds(comm::all_reduce_value(*comm_, deadline_.count(), comm::ReduceOp::max));
    checkpoint_comm_ = comm_->split(0, comm_->rank(), deadline_);
  }
}

CheckpointWriter::~CheckpointWriter() {
  if (!flight_) return;
  // Destroyed by an error (this rank's step failed, or a peer's): the save in flight is abandoned
  // instead of waited for, so the error is not held up by a commit that a failed peer may never
  // join (up to the deadline). Aborting tells the peers' writers at once; the previous checkpoint
  // stays `latest`, as after a crash.
  if (std::uncaught_exceptions() > 0 && checkpoint_comm_ && !flight_->done.load(std::memory_order_acquire)) {
    checkpoint_comm_->abort("the job is failing: its background checkpoint save is abandoned");
  }
  if (flight_->thread.joinable()) flight_->thread.join();
  // A failure nobody waited for would otherwise vanish: say so where the operator looks.
  if (flight_->error) {
    try {
      std::rethrow_exception(flight_->error);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "loom: a background checkpoint save failed and was not waited for: %s\n", e.what());
    } catch (...) {
      std::fprintf(stderr, "loom: a background checkpoint save failed and was not waited for\n");
    }
  }
}

comm::Communicator* CheckpointWriter::checkpoint_comm() const noexcept { return checkpoint_comm_.get(); }

bool CheckpointWriter::in_flight() const noexcept { return flight_ != nullptr; }

void CheckpointWriter::settle(bool block) {
  if (!flight_ || (!block && !flight_->done.load(std::memory_order_acquire))) return;
  if (flight_->thread.joinable()) flight_->thread.join();
  if (flight_->error) {
    failure_ = flight_->error;
    resplit_ = true;
  } else {
    reports_.push_back(std::move(flight_->report));
  }
  flight_.reset();
}

void CheckpointWriter::wait() {
  settle(true);
  if (failure_) std::rethrow_exception(std::exchange(failure_, nullptr));
}

void CheckpointWriter::agree(const std::exception_ptr& failure, const char* what) {
  if (checkpoint_comm() != nullptr) {
    comm::throw_if_any_failed(*checkpoint_comm(), failure, what);
  } else if (failure) {
    std::rethrow_exception(failure);
  }
}

detail::ShardedSave CheckpointWriter::begin(const TrainingProgress& progress) {
  wait();
  // A failed save may have left the checkpoint communicator aborted (a timeout): every rank saw the
  // failure (it was agreed) and makes this save at the same step, so each takes a fresh one here.
  if (resplit_ && comm_ != nullptr) checkpoint_comm_ = comm_->split(0, comm_->rank(), deadline_);
  resplit_ = false;
  const int rank = comm_ != nullptr ? comm_->rank() : 0, world = comm_ != nullptr ? comm_->size() : 1;
  detail::ShardedSave content;
  std::exception_ptr failure;
  try {
    content = detail::sharded_save(model_, optimizer_, progress, rank, world);
  } catch (...) {
    failure = std::current_exception();
  }
  agree(failure, "listing a checkpoint's pieces");
  return content;
}

std::vector<SaveReport> CheckpointWriter::finished() {
  settle(false);
  return std::exchange(reports_, {});
}

SaveReport CheckpointWriter::save(const std::string& run_dir, const TrainingProgress& progress) {
  const Clock::time_point start = Clock::now();
  const detail::ShardedSave content = begin(progress);
  SaveReport report;
  try {
    report.where = detail::write_and_commit(run_dir, content, checkpoint_comm(), options_.max_write_bytes_per_second);
  } catch (...) {
    resplit_ = true;
    throw;
  }
  report.step = progress.step;
  report.bytes = content.data_bytes();
  report.blocked_seconds = report.write_seconds = seconds_since(start);
  return report;
}

void CheckpointWriter::save_async(const std::string& run_dir, const TrainingProgress& progress) {
  const Clock::time_point start = Clock::now();
  detail::ShardedSave content = begin(progress);
  std::exception_ptr failure;
  try {
    // The staging tensors of the last snapshot fit this one (the layout does not change); the
    // first snapshot allocates them, pinned for a GPU model so the copies run at full speed.
    if (staging_.size() != content.pieces.size()) {
      const Device device = model_.parameter_space().device();
      const std::shared_ptr<Allocator> host = device.is_cpu() ? cpu_allocator() : pinned_host_allocator(device.index());
      staging_.clear();
      for (const StoredPiece& p : content.pieces) staging_.push_back(Tensor::empty(p.data.shape(), p.data.dtype(), host));
    }
    for (std::size_t i = 0; i < content.pieces.size(); ++i) {
      Tensor& staged = staging_[i];
      require(staged.shape() == content.pieces[i].data.shape() && staged.dtype() == content.pieces[i].data.dtype(),
              "checkpoint writer: the layout of '", content.pieces[i].piece.tensor, "' changed since the last save");
      copy(staged, content.pieces[i].data);
      content.pieces[i].data = staged;
    }
  } catch (...) {
    failure = std::current_exception();
  }
  // No background write starts unless every rank has its copy: a rank left alone in the commit
  // would wait out the deadline.
  agree(failure, "copying a checkpoint to host memory");
  auto flight = std::make_unique<Flight>();
  flight->report.step = progress.step;
  flight->report.asynchronous = true;
  flight->report.bytes = content.data_bytes();
  flight->report.blocked_seconds = seconds_since(start);
  Flight* f = flight.get();
  auto write = [this, f, run_dir, content = std::move(content)] {
    const Clock::time_point began = Clock::now();
    try {
      f->report.where = detail::write_and_commit(run_dir, content, checkpoint_comm(), options_.max_write_bytes_per_second);
    } catch (...) {
      f->error = std::current_exception();
    }
    f->report.write_seconds = seconds_since(began);
    f->done.store(true, std::memory_order_release);
  };
  try {
    flight->thread = std::thread(write);
  } catch (const std::system_error&) {
    write();  // no thread to be had: the peers' commit still needs this rank, so it writes now
  }
  flight_ = std::move(flight);
}

}  // namespace loom::io
