// Report step "softmax_trace" (SPEC step 2): the default 8 scores read 2 at a time.
#include "report/softmax_trace_json.hpp"
#include "report/step_registry.hpp"

namespace flashbox::report {
namespace {

nlohmann::json run_softmax_trace(ReportContext &) {
  const auto values = cpu::default_trace_values();
  return to_json(cpu::online_softmax_trace(values, 2));
}

FLASHBOX_REPORT_STEP(20, "softmax_trace", run_softmax_trace);

}  // namespace
}  // namespace flashbox::report
