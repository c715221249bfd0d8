// Checks that a model calls its unit hooks as model/model.hpp asks: for every unit, in forward
// before_forward(u) ... after_forward(u), and in backward before_backward(u) ... after_backward(u),
// each "before" closed by its "after" before it comes again. A model that forgets a hook trains
// without complaint in one process and under DDP, and then fails under ZeRO-2 or 3 with an error
// deep inside a kernel (an undefined gradient or value): Trainer audits its first step with this,
// so the mistake is named, with the hook and the unit, wherever it is made.
//
//   model::HookAudit audit(model);   // subscribes; unsubscribes when destroyed
//   ... forward and backward of one or more micro-batches ...
//   audit.check();                   // throws an invalid_argument Error naming the first problem
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "loom/model/model.hpp"

namespace loom::model {

class HookAudit {
 public:
  explicit HookAudit(Model& model);
  ~HookAudit();
  HookAudit(const HookAudit&) = delete;
  HookAudit& operator=(const HookAudit&) = delete;

  // The first misuse seen (a hook called twice without its pair, an "after" without its "before",
  // a unit number out of range), else the first unit whose hooks were left open or (every_unit:
  // for a model whose every unit takes part in every step) never ran; empty when none.
  std::string problem(bool every_unit = true) const;
  void check(bool every_unit = true) const;  // throws problem(), if any, as an invalid_argument Error

 private:
  enum Phase { forward = 0, backward = 1 };
  void before(Phase phase, std::size_t unit);
  void after(Phase phase, std::size_t unit);

  Model& model_;
  Model::HooksId id_ = 0;
  std::vector<std::string> names_;          // the units' names, for messages
  std::vector<bool> open_[2], completed_[2];
  std::string misuse_;                      // the first call out of order
};

}  // namespace loom::model
