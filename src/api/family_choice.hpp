// Choosing a CUDA kernel family for one call, forward or backward: the caller's family (options, or
// a private tuning override) or, for auto, the Hopper family on compute capability 9.x when its plan takes the
// call and the sm80 family otherwise. A family that is asked for by name and declines is an error
// naming its reason; a request the family calls bad (e.g. a tile it has no configuration for) is an
// error whatever the family.
#pragma once
#ifdef FLASHBOX_HAVE_CUDA
#include <string>

#include "core/plan.hpp"
#include "core/problem.hpp"
#include "flashbox/flashbox.h"

namespace flashbox::detail {

// Compute capability of the current device as major * 10 + minor, or a failure code (negative).
int current_compute_capability(int &cc);
const char *sm90_not_built();
// Whether the current device is compute capability 9.x (false, with no error recorded, without one).
bool device_is_hopper();

// Runs the first plan `planner(family)` gives in the order described above (tuning.family); sets
// the kernel name. Checks tuning.sm_margin against the device first.
template <class Planner>
int run_first_plan(const Tuning &tuning, const char *pass, Planner &&planner);

// Clears a stale CUDA error, runs, records the kernel name on success.
int run_plan(Plan &plan);
// options.sm_margin below the current device's SM count: FLASHBOX_OK, or fail(INVALID_ARGUMENT).
int check_sm_margin(int sm_margin);
int declined(flashbox_kernel_family family, const char *pass, const PlanResult &r);
int no_flash_family(int cc, const char *pass);
// Auto choice, and no family takes the call: every family's reason (sm90_why empty if not asked).
int none_takes(const char *pass, const std::string &sm90_why, const PlanResult &sm80);

template <class Planner>
int run_first_plan(const Tuning &tuning, const char *pass, Planner &&planner) {
  const flashbox_kernel_family requested = tuning.family;
  if (tuning.sm_margin != 0)
    if (int rc = check_sm_margin(tuning.sm_margin)) return rc;
  int cc = 0;
  if (int rc = current_compute_capability(cc)) return rc;
  if (cc < 80) return no_flash_family(cc, pass);
  std::string sm90_why;  // auto: why the Hopper family declined, for the error if sm80 declines too
  if (requested == FLASHBOX_FAMILY_AUTO && cc / 10 == 9) {
    PlanResult r = planner(FLASHBOX_FAMILY_SM90);
    if (r.plan) return run_plan(*r.plan);
    if (r.code != 0) return declined(FLASHBOX_FAMILY_SM90, pass, r);
    sm90_why = r.why_not;
  }
  const flashbox_kernel_family family = requested == FLASHBOX_FAMILY_SM90 ? FLASHBOX_FAMILY_SM90 : FLASHBOX_FAMILY_SM80;
  if (family == FLASHBOX_FAMILY_SM90 && cc / 10 != 9)
    return declined(family, pass, PlanResult::no("the device is not compute capability 9.x"));
  PlanResult r = planner(family);
  if (!r.plan) return requested == FLASHBOX_FAMILY_AUTO ? none_takes(pass, sm90_why, r) : declined(family, pass, r);
  return run_plan(*r.plan);
}

}  // namespace flashbox::detail
#endif
