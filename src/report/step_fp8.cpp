// Report step "fp8" (issue 48: FP8 next to bf16 on the page): on a Hopper GPU with an sm_90a build,
// flashbox's e4m3 forward beside its bf16 forward on the same values (fp8_compare.hpp); anywhere else
// the step is not measured, with the one-line reason.
#include "report/build_config.hpp"
#include "report/fp8_compare.hpp"
#include "report/report.hpp"
#include "report/step_registry.hpp"

namespace flashbox::report {
namespace {

nlohmann::json run_fp8(ReportContext &ctx) {
  const auto gpu = ctx.has_gpu ? gpu_info() : std::nullopt;
  if (const auto why = fp8_unavailable_reason(gpu, built_with_sm90a())) return not_measured_step(*why);
  const Fp8Config config = fp8_config(ctx.quick, ctx.seed);
  return fp8_step_json(config, gpu->name, measure_fp8(config, ctx.progress));
}

FLASHBOX_REPORT_STEP(52, "fp8", run_fp8);

}  // namespace
}  // namespace flashbox::report
