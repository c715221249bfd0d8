#include "loom/comm/work.hpp"

#include <thread>

#include "loom/core/error.hpp"

namespace loom::comm {

void detail::WorkState::complete(std::exception_ptr failure) {
  std::function<void(const Completion&)> callback;
  {
    const std::lock_guard lock(mutex);
    if (completing) return;
    completing = true;
    callback = std::move(completed);
    error = std::move(failure);  // waiters read it only once done is set; late callbacks at once
    if (!callback) {  // most calls: done under this one lock
      device_wait = nullptr;
      done.store(true, std::memory_order_release);
    }
  }
  if (!callback) {
    done_changed.notify_all();
    return;
  }
  // A callback that throws must not leave the operation half complete: its waiters would hang.
  try {
    callback(Completion{error == nullptr, device_seconds});
  } catch (...) {
  }
  {
    const std::lock_guard lock(mutex);
    device_wait = nullptr;
    done.store(true, std::memory_order_release);
  }
  done_changed.notify_all();
}

void Work::on_complete(std::function<void(const Completion&)> callback) const {
  Completion completion;  // a default Work: done, successfully, with no device time
  if (state_) {
    const std::lock_guard lock(state_->mutex);
    if (!state_->completing) {
      state_->completed = std::move(callback);
      return;
    }
    // Done, or being completed: complete() set the error, and the backend the device time, first.
    completion = Completion{state_->error == nullptr, state_->device_seconds};
  }
  callback(completion);
}

bool Work::is_completed() const { return !state_ || state_->done.load(std::memory_order_acquire); }

void Work::wait(std::chrono::milliseconds timeout) const {
  if (!state_) return;
  if (state_->help && !state_->done.load(std::memory_order_acquire)) {
    if (const std::shared_ptr<void> helper = state_->helper.lock()) state_->help(helper, *state_);
  }
  // Done (here, or before): the error was stored before `done` was set, so it is read without the lock.
  if (state_->done.load(std::memory_order_acquire)) {
    if (state_->error) std::rethrow_exception(state_->error);
    return;
  }
  // Small collectives finish within microseconds: spin briefly before sleeping, so that waking
  // this thread does not dominate their latency.
  const auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
  while (!state_->done.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < spin_until) {
    std::this_thread::yield();
  }
  std::unique_lock lock(state_->mutex);
  const auto is_done = [&] { return state_->done.load(std::memory_order_relaxed); };
  if (timeout == std::chrono::milliseconds::max()) {
    state_->done_changed.wait(lock, is_done);
  } else if (!state_->done_changed.wait_for(lock, timeout, is_done)) {
    fail(ErrorCategory::timeout, state_->what, " did not complete within ", timeout.count(), " ms");
  }
  if (state_->error) std::rethrow_exception(state_->error);
}

void Work::wait_on(StreamRef stream) const {
  if (!state_) return;
  {
    const std::lock_guard lock(state_->mutex);
    if (!state_->done.load(std::memory_order_relaxed) && state_->device_wait) {
      state_->device_wait(stream);
      return;
    }
  }
  wait();
}

std::exception_ptr Work::error() const {
  if (!state_) return nullptr;
  const std::lock_guard lock(state_->mutex);
  return state_->done.load(std::memory_order_relaxed) ? state_->error : nullptr;
}

}  // namespace loom::comm
