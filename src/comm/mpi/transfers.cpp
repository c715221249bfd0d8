#include "src/comm/mpi/transfers.hpp"

#include <algorithm>
#include <chrono>
#include <thread>

#include "loom/comm/backend/call_queue.hpp"
#include "loom/core/mpi_check.hpp"

namespace loom::comm::detail {

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto hot_time = std::chrono::microseconds(20);
constexpr auto spin_time = std::chrono::milliseconds(100);
constexpr auto patient_after = std::chrono::seconds(1);
constexpr auto first_sleep = std::chrono::microseconds(50), short_sleep = std::chrono::microseconds(200),
               longest_sleep = std::chrono::microseconds(2000);

}  // namespace

MpiTransfers::~MpiTransfers() {
  int finalized = 1;
  MPI_Finalized(&finalized);
  if (finalized || parked_.empty()) return;
  const auto until = Clock::now() + std::chrono::milliseconds(100);
  bool pending = true;
  while (pending && Clock::now() < until) {
    int done = 0;
    MPI_Testall(static_cast<int>(parked_.size()), parked_.data(), &done, MPI_STATUSES_IGNORE);
    pending = !done;
    if (pending) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (pending) {
    backend::note_abandoned_call();                            // MPI_Finalize would wait for them
    new std::vector<std::shared_ptr<void>>(std::move(kept_));  // MPI may still use them: never freed
  }
}

void* MpiTransfers::scratch(int slot, std::size_t bytes) {
  auto& buffer = scratch_[slot];
  if (!buffer) buffer = std::make_shared<std::vector<unsigned char>>();
  if (buffer->size() < bytes) {
    // Grown by half again, so that slightly growing calls do not reallocate every time.
    buffer->clear();
    buffer->shrink_to_fit();
    buffer->resize(std::max(bytes, buffer->capacity() + buffer->capacity() / 2));
  }
  return buffer->data();
}

std::span<MPI_Request> MpiTransfers::requests(std::size_t count) {
  if (requests_.size() < count) requests_.resize(count);
  std::fill_n(requests_.begin(), count, MPI_REQUEST_NULL);
  return {requests_.data(), count};
}

std::span<const void*> MpiTransfers::pointers(std::size_t count) {
  if (pointers_.size() < count) pointers_.resize(count);
  return {pointers_.data(), count};
}

template <class Done>
void MpiTransfers::poll(Done&& done, const std::string& what) {
  // Most waits end within a few tests: those read no clock.
  for (int i = 0; i < 16; ++i) {
    if (done()) return;
  }
  const auto start = Clock::now();
  auto sleep = std::chrono::duration_cast<std::chrono::microseconds>(first_sleep);
  for (;;) {
    if (done()) return;
    if (status_.aborted()) status_.throw_aborted(what);
    const auto waited = Clock::now() - start;
    if (waited < hot_time) continue;  // yielding would cost more than a peer a few microseconds behind
    if (waited < spin_time) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(sleep);
      sleep = std::min<std::chrono::microseconds>(sleep * 2, waited < patient_after ? short_sleep : longest_sleep);
    }
  }
}

void MpiTransfers::park(std::span<MPI_Request> requests) {
  for (MPI_Request& request : requests) {
    if (request == MPI_REQUEST_NULL) continue;
    // The communicator is aborted: nothing will receive into this call's buffers any more. A
    // receive is cancelled (so that it completes, and MPI can be finalized); a send cannot be, and
    // completes only if its peer receives it.
    MPI_Cancel(&request);
    parked_.push_back(request);
    request = MPI_REQUEST_NULL;
  }
}

void MpiTransfers::wait_all(std::span<MPI_Request> requests, const std::string& what,
                            std::span<MPI_Request> also_pending) {
  try {
    poll(
        [&] {
          int finished = 0;
          check_mpi(MPI_Testall(static_cast<int>(requests.size()), requests.data(), &finished, MPI_STATUSES_IGNORE),
                    what);
          return finished != 0;
        },
        what);
  } catch (const Error& e) {
    park(requests);
    park(also_pending);
    // The requests may still use the call's buffers and the scratch: keep them, and start afresh.
    for (auto& buffer : held_) kept_.push_back(std::move(buffer));
    held_.clear();
    for (auto& buffer : scratch_) kept_.push_back(std::move(buffer));
    if (e.category() == ErrorCategory::mpi) status_.abort(ErrorCategory::mpi, e.detail());
    throw;
  }
}

void MpiTransfers::wait_for_message(int peer, int tag, MPI_Comm comm, MPI_Message& message, MPI_Status& status,
                                    const std::string& what) {
  try {
    poll(
        [&] {
          int arrived = 0;
          check_mpi(MPI_Improbe(peer, tag, comm, &arrived, &message, &status), what);
          return arrived != 0;
        },
        what);
  } catch (const Error& e) {
    if (e.category() == ErrorCategory::mpi) status_.abort(ErrorCategory::mpi, e.detail());
    throw;
  }
}

}  // namespace loom::comm::detail
