#include "loom/comm/backend/in_order_deadlines.hpp"

#include "loom/core/error.hpp"

namespace loom::comm::backend {

void InOrderDeadlines::submitted(Clock::time_point now) {
  if (in_flight_ == 0) oldest_since_ = now;
  ++in_flight_;
}

void InOrderDeadlines::completed(Clock::time_point now) {
  require(in_flight_ > 0, "InOrderDeadlines: a call completed with none in flight");
  --in_flight_;
  oldest_since_ = now;
}

std::optional<InOrderDeadlines::Clock::time_point> InOrderDeadlines::deadline() const {
  if (in_flight_ == 0) return std::nullopt;
  return oldest_since_ + timeout_;
}

bool InOrderDeadlines::expired(Clock::time_point now) const {
  const auto at = deadline();
  return at && now > *at;
}

}  // namespace loom::comm::backend
