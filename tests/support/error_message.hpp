// The message of the loom::Error a call throws, or "no error": for code that runs on in-process
// ranks, whose outcome must be recorded and checked after the ranks end (Catch's assertions are
// not thread-safe).
#pragma once

#include <string>

#include "loom/core/error.hpp"

namespace loom::test {

template <class Call>
std::string error_message(const Call& call) {
  try {
    call();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

// "<category>: <message>" of the loom::Error a call throws, or "no error".
template <class Call>
std::string error_outcome(const Call& call) {
  try {
    call();
  } catch (const Error& e) {
    return std::string(to_string(e.category())) + ": " + e.what();
  }
  return "no error";
}

}  // namespace loom::test
