#include "loom/model/hook_audit.hpp"

#include "loom/core/error.hpp"

namespace loom::model {

namespace {

const char* hook_name(bool before, int phase) {
  if (before) return phase == 0 ? "before_forward" : "before_backward";
  return phase == 0 ? "after_forward" : "after_backward";
}

}  // namespace

HookAudit::HookAudit(Model& model) : model_(model) {
  for (const Unit& unit : model.parameter_space().units()) names_.push_back(unit.name);
  for (int phase = 0; phase < 2; ++phase) {
    open_[phase].assign(names_.size(), false);
    completed_[phase].assign(names_.size(), false);
  }
  id_ = model_.add_unit_hooks({[this](std::size_t u, StreamRef) { before(forward, u); },
                               [this](std::size_t u, StreamRef) { after(forward, u); },
                               [this](std::size_t u, StreamRef) { before(backward, u); },
                               [this](std::size_t u, StreamRef) { after(backward, u); }});
}

HookAudit::~HookAudit() { model_.remove_unit_hooks(id_); }

void HookAudit::before(Phase phase, std::size_t unit) {
  if (!misuse_.empty()) return;
  if (unit >= names_.size()) {
    misuse_ = loom::detail::concat(hook_name(true, phase), "(", unit, ") names no unit: the model has ", names_.size());
    return;
  }
  if (open_[phase][unit]) {
    misuse_ = loom::detail::concat(hook_name(true, phase), "(", unit, ") of unit '", names_[unit], "' came again before ",
                                   hook_name(false, phase), "(", unit, ")");
    return;
  }
  open_[phase][unit] = true;
}

void HookAudit::after(Phase phase, std::size_t unit) {
  if (!misuse_.empty()) return;
  if (unit >= names_.size()) {
    misuse_ = loom::detail::concat(hook_name(false, phase), "(", unit, ") names no unit: the model has ", names_.size());
    return;
  }
  if (!open_[phase][unit]) {
    misuse_ = loom::detail::concat(hook_name(false, phase), "(", unit, ") of unit '", names_[unit], "' came without ",
                                   hook_name(true, phase), "(", unit, ") before it");
    return;
  }
  open_[phase][unit] = false;
  completed_[phase][unit] = true;
}

std::string HookAudit::problem(bool every_unit) const {
  if (!misuse_.empty()) return misuse_;
  for (int phase = 0; phase < 2; ++phase) {
    for (std::size_t u = 0; u < names_.size(); ++u) {
      if (open_[phase][u]) {
        return loom::detail::concat(hook_name(true, phase), "(", u, ") of unit '", names_[u], "' was never closed by ",
                                    hook_name(false, phase), "(", u, ")");
      }
      if (every_unit && !completed_[phase][u]) {
        return loom::detail::concat("unit ", u, " ('", names_[u], "') never got ", hook_name(true, phase), "(", u,
                                    ") and ", hook_name(false, phase), "(", u, ")");
      }
    }
  }
  return {};
}

void HookAudit::check(bool every_unit) const {
  const std::string found = problem(every_unit);
  if (found.empty()) return;
  fail(ErrorCategory::invalid_argument, "the model's unit hooks: ", found, ". A model calls before_forward(u) before "
       "its forward touches unit u's parameters and after_forward(u) once done with them, and likewise "
       "before_backward(u) and after_backward(u) around its backward (loom/model/model.hpp); ZeRO-2 and 3 bind a "
       "unit's gradients and values in these hooks");
}

}  // namespace loom::model
