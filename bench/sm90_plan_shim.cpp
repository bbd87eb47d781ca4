// A bench-only door to the sm90 forward's plan for a shape the C API does not open yet (head_dim
// 256: src/api/validate.cpp still answers UNSUPPORTED_HEAD_DIM for CUDA flash beyond 64 and 128,
// since the other families and the backward have no 256). It builds the Problem the API would
// build (make_problem, the library's default tuning), asks plan_sm90_forward once, and runs that
// plan as often as asked, so a timing loop pays only the launch, like the API's own call.
// bench/compare_masks.py --d256 loads it beside libflashbox.so; it is never installed.
#include <cstdio>
#include <cstring>
#include <string>

#include "core/backends.hpp"
#include "core/problem.hpp"
#include "flashbox/flashbox.h"

using flashbox::detail::Plan;

extern "C" {

// A plan for `a` (device pointers; softmax_scale 0 = 1/sqrt(head_dim)), or null with the reason in
// `msg`; with a plan, `msg` gets its kernel name.
void *fb_shim_sm90_plan(const flashbox_attention_args *a, char *msg, int msg_len) {
  const flashbox::detail::Problem p = flashbox::detail::make_problem(*a);
  flashbox::detail::PlanResult r = flashbox::detail::plan_sm90_forward(p);
  const std::string &text = r.plan ? r.plan->kernel : r.why_not;
  std::snprintf(msg, size_t(msg_len), "%s", text.c_str());
  return r.plan ? new Plan(std::move(*r.plan)) : nullptr;
}

int fb_shim_sm90_run(void *plan) { return static_cast<Plan *>(plan)->run(); }

void fb_shim_sm90_free(void *plan) { delete static_cast<Plan *>(plan); }
}
