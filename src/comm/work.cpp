#include "loom/comm/work.hpp"

#include "loom/core/error.hpp"

namespace loom::comm {

void detail::WorkState::complete(std::exception_ptr failure) {
  {
    const std::lock_guard lock(mutex);
    done = true;
    error = std::move(failure);
  }
  done_changed.notify_all();
}

bool Work::is_completed() const {
  if (!state_) return true;
  const std::lock_guard lock(state_->mutex);
  return state_->done;
}

void Work::wait(std::chrono::milliseconds timeout) const {
  if (!state_) return;
  std::unique_lock lock(state_->mutex);
  const auto is_done = [&] { return state_->done; };
  if (timeout == std::chrono::milliseconds::max()) {
    state_->done_changed.wait(lock, is_done);
  } else if (!state_->done_changed.wait_for(lock, timeout, is_done)) {
    fail(ErrorCategory::timeout, state_->what, " did not complete within ", timeout.count(), " ms");
  }
  if (state_->error) std::rethrow_exception(state_->error);
}

std::exception_ptr Work::error() const {
  if (!state_) return nullptr;
  const std::lock_guard lock(state_->mutex);
  return state_->error;
}

}  // namespace loom::comm
