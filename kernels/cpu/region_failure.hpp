// The first exception thrown by the threads of an OpenMP region, kept to be rethrown after it (no
// exception may leave a region): each thread's work runs under capture(), and the caller calls
// rethrow() once the region has ended. The CPU kernels that spread work over threads share it.
#pragma once

#include <exception>
#include <utility>

namespace loom::kernels::cpu {

class RegionFailure {
 public:
  // Runs work(); an exception it throws is kept (the first of any thread's) instead of leaving.
  template <class Work>
  void capture(Work&& work) noexcept {
    try {
      std::forward<Work>(work)();
    } catch (...) {
      keep(std::current_exception());
    }
  }
  // Whether a thread has failed: every thread's failure is seen only after a barrier that follows it.
  bool failed() const { return static_cast<bool>(first_); }
  // Rethrows the kept exception, if any (after the region).
  void rethrow() const {
    if (first_) std::rethrow_exception(first_);
  }

 private:
  void keep(std::exception_ptr failure) noexcept {
#pragma omp critical(loom_cpu_region_failure)
    {
      if (!first_) first_ = std::move(failure);
    }
  }

  std::exception_ptr first_;
};

}  // namespace loom::kernels::cpu
