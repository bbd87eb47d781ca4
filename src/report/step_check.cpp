// Report step "check" (SPEC step 4): the correctness table, GPU rows included when a GPU is present.
#include "report/correctness.hpp"
#include "report/step_registry.hpp"

namespace flashbox::report {
namespace {

nlohmann::json run_check(ReportContext &ctx) {
  CheckConfig config;  // batch 2, 12 heads, T 1000 (not a multiple of 64), head_dim 64, bf16, causal
  if (ctx.quick) config.shape = {1, 257, 257, 4, 4, 64, FLASHBOX_BFLOAT16, true};  // still not a multiple of 64
  config.seed = ctx.seed;
  config.gpu = ctx.has_gpu;
  return to_json(run_check(config, ctx.progress));
}

FLASHBOX_REPORT_STEP(40, "check", run_check);

}  // namespace
}  // namespace flashbox::report
