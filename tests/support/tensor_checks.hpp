// Helpers shared by loom's tests: poisoning outputs and matching loom::Error.
#pragma once

#include <catch2/catch.hpp>

#include <exception>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "loom/core/error.hpp"
#include "loom/core/tensor.hpp"
#include "loom/core/tensor_ops.hpp"

namespace loom::test {

// Every byte 0xFF: NaN in f32, f16 and bf16 (and -1 or the maximum in integer dtypes), so an
// element a kernel forgot to write fails any comparison, even with an expected zero.
inline constexpr unsigned poison_byte = 0xFF;
inline void poison(const Tensor& tensor, StreamRef stream = {}) {
  fill(tensor.as_bytes(), poison_byte, stream);
}

// Matches a loom::Error of one category whose what() contains every given fragment.
class ErrorMatcher : public Catch::MatcherBase<Error> {
 public:
  ErrorMatcher(ErrorCategory category, std::vector<std::string> fragments)
      : category_(category), fragments_(std::move(fragments)) {}

  bool match(const Error& error) const override {
    if (error.category() != category_) return false;
    const std::string what = error.what();
    for (const std::string& fragment : fragments_) {
      if (what.find(fragment) == std::string::npos) return false;
    }
    return true;
  }

  std::string describe() const override {
    std::string text = "is a loom '" + std::string(to_string(category_)) + "' error mentioning";
    for (const std::string& fragment : fragments_) text += " '" + fragment + "'";
    return text;
  }

 private:
  ErrorCategory category_;
  std::vector<std::string> fragments_;
};

inline ErrorMatcher IsError(ErrorCategory category, std::initializer_list<std::string> fragments = {}) {
  return ErrorMatcher(category, fragments);
}
inline ErrorMatcher IsError(ErrorCategory category, const std::vector<std::string>& fragments) {
  return ErrorMatcher(category, fragments);
}

// What call threw, as what() says it, or "no error": for rank threads, which must not use Catch2's
// assertions, and for errors every rank of a job must report.
inline std::string error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace loom::test
