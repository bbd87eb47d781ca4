#include "report/step_registry.hpp"

namespace flashbox::report {

std::vector<StepEntry> &step_registry() {
  static std::vector<StepEntry> entries;  // function-local: safe from static-init order
  return entries;
}

bool register_step(int order, const char *name, StepRun run) {
  step_registry().push_back({order, name, run});
  return true;
}

}  // namespace flashbox::report
