// The in-process backend: ranks are threads of one process sharing memory, for fast tests of
// everything above the communicator and for single-machine CPU runs without MPI. Each
// communicator runs its calls in order on its own worker thread, so calls are asynchronous.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "loom/comm/communicator.hpp"

namespace loom::comm {

// `size` communicators of one group; communicator r is rank r and belongs to one thread.
std::vector<std::unique_ptr<Communicator>> make_in_process_communicators(int size, const CommOptions& options = {});

// Runs body on `size` threads, each with its rank's communicator; after every thread has ended,
// rethrows the first exception one of them threw.
void run_in_process(int size, const std::function<void(Communicator&)>& body, const CommOptions& options = {});

}  // namespace loom::comm
