// What a kernel family answers for one problem: a plan that is ready to run, or the reason it cannot
// take the call. Each family exposes `plan_<family>(problem) -> PlanResult`; src/api/ asks the
// families in its order of preference and runs the first plan it accepts, so the work a family does
// to decide (tensor maps, tile and schedule choice, launch geometry) is done once and reused by the run.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace flashbox::detail {

struct Plan {
  std::string kernel;           // what flashbox_last_kernel() reports after the run
  int64_t workspace_bytes = 0;  // device scratch the run allocates
  std::function<int()> run;     // launches on the problem's stream: FLASHBOX_OK or fail(code, message)
};

struct PlanResult {
  std::optional<Plan> plan;
  std::string why_not;  // when there is no plan: the reason, for the error a forced family gets
  int code = 0;         // when there is no plan and the request itself is bad (e.g. a tile the
                        // family does not have): the error code to fail with whatever the family
  static PlanResult no(std::string why, int code = 0) { return {std::nullopt, std::move(why), code}; }
};

}  // namespace flashbox::detail
