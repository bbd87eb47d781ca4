// The one place that decides which forward implementation runs. Every exported forward call goes
// validate -> normalise (Problem) -> resolve the options -> choose (device, impl, kernel family) ->
// run the chosen plan, inside guarded_call so no exception crosses the C ABI and a failed call writes
// nothing and leaves the last successful call's introspection.
//   CPU:  auto -> blocked; naive; blocked; flash is not a CPU level.
//   CUDA: auto/flash -> the Hopper family on compute capability 9.x when built for sm_90a and its plan
//         takes the call (the mask families included, on their own kernels), else the sm80 family; options.family (or the private tuning override
//         forward_family) forces one. head_dim_v != head_dim (the extension): the pair's own Hopper
//         kernel where it has one and takes the call (cuda_forward_native_head_dim_v; the backward's
//         the same way, cuda_backward_native_head_dim_v), else the kernels on column slices of V
//         (head_dim_v_split.hpp).
//         naive -> cuBLAS + softmax; blocked is not a CUDA level.
//         dtype fp8 e4m3 (flashbox_attention_forward_ext): the sm90 fp8 forward only (auto or flash;
//         the family override sm80 and impl naive are refused: no other kernel takes e4m3).
#include <cstring>
#include <string>

#include "api/dispatch.hpp"
#include "api/family_choice.hpp"
#include "api/guarded_call.hpp"
#include "api/options.hpp"
#include "api/validate.hpp"
#include "core/backends.hpp"
#include "core/call_state.hpp"
#include "core/error.hpp"
#include "flashbox/flashbox.h"
#ifdef FLASHBOX_HAVE_SM90
#include "cuda/forward/sm90/tile_policy.hpp"
#endif

namespace flashbox::detail {
namespace {

int cpu_forward(const Problem &p) {
  switch (p.impl) {
    case FLASHBOX_NAIVE: return cpu_naive_forward(p);
    case FLASHBOX_AUTO:
    case FLASHBOX_BLOCKED: return cpu_blocked_forward(p);
    default: return fail(FLASHBOX_ERR_UNSUPPORTED_IMPL, "impl = flash is not available on device = cpu");
  }
}

#ifdef FLASHBOX_HAVE_CUDA
int cuda_flash_forward(const Problem &p) {
  return run_first_plan(p.tuning, "forward", [&](flashbox_kernel_family f) {
#ifdef FLASHBOX_HAVE_SM90
    // The extension's mask families: the sm90 plan takes them on its mask-family kernels where it can
    // (bf16, head dims up to 128, 128-multiple mask blocks) and otherwise says why, so
    // auto falls back to the sm80 family (docs/masks.md).
    if (f == FLASHBOX_FAMILY_SM90) return plan_sm90_forward(p);
#endif
    return f == FLASHBOX_FAMILY_SM80 ? plan_sm80_forward(p) : PlanResult::no(sm90_not_built());
  });
}

}  // namespace

int cuda_forward(const Problem &p) {
  switch (p.impl) {
    case FLASHBOX_NAIVE:
      if (const std::string what = extension_in_use(p); !what.empty())
        return fail(FLASHBOX_ERR_UNSUPPORTED_IMPL, "impl = naive on device = cuda has no " + what + " (use impl = auto)");
      return cuda_naive_forward(p);
    case FLASHBOX_AUTO:
    case FLASHBOX_FLASH: return cuda_flash_forward(p);
    default: return fail(FLASHBOX_ERR_UNSUPPORTED_IMPL, "impl = blocked is not available on device = cuda");
  }
}

int cuda_fp8_forward(const Problem &p) {
  if (p.impl != FLASHBOX_AUTO && p.impl != FLASHBOX_FLASH)
    return fail(FLASHBOX_ERR_UNSUPPORTED_IMPL,
                "dtype = FLASHBOX_FLOAT8_E4M3 on device = cuda runs in the sm90 fp8 forward only (impl = auto or flash)");
#ifdef FLASHBOX_HAVE_SM90
  if (p.tuning.family == FLASHBOX_FAMILY_SM80)
    return fail(FLASHBOX_ERR_UNSUPPORTED_IMPL,
                "dtype = FLASHBOX_FLOAT8_E4M3: the sm80 family has no fp8 kernel (the sm90 fp8 forward runs it)");
  if (!device_is_hopper())
    return fail(FLASHBOX_ERR_UNSUPPORTED_IMPL,
                "dtype = FLASHBOX_FLOAT8_E4M3 on device = cuda needs a Hopper GPU (compute capability 9.0); it runs "
                "on device = cpu");
  if (p.tuning.sm_margin != 0)
    if (int rc = check_sm_margin(p.tuning.sm_margin)) return rc;
  PlanResult r = plan_sm90_fp8_forward(p);
  if (!r.plan)
    return fail(r.code != 0 ? r.code : FLASHBOX_ERR_UNSUPPORTED_IMPL,
                "dtype = FLASHBOX_FLOAT8_E4M3 on device = cuda: " + r.why_not + " (device = cpu takes it)");
  return run_plan(*r.plan);
#else
  return fail(FLASHBOX_ERR_UNSUPPORTED_IMPL, std::string("dtype = FLASHBOX_FLOAT8_E4M3 on device = cuda: ") + sm90_not_built());
#endif
}

// head_dim_v != head_dim with a kernel of its own for the pair (sm90::dv_kernel, the Hopper
// forward's table): that kernel runs the call when the family choice allows the Hopper family (auto
// or sm90), the device is a Hopper and its plan takes the call. Declined (varlen, softcap or ALiBi,
// strides the TMA cannot describe, a tuning tile of another kernel): false, and the caller splits V.
bool cuda_forward_native_head_dim_v(const Problem &p, int &rc) {
#ifdef FLASHBOX_HAVE_SM90
  if (p.impl != FLASHBOX_AUTO && p.impl != FLASHBOX_FLASH) return false;
  if (sm90::dv_kernel(p.head_dim, p.head_dim_v) == nullptr || p.tuning.family == FLASHBOX_FAMILY_SM80) return false;
  if (!device_is_hopper()) return false;
  if (p.tuning.sm_margin != 0 && (rc = check_sm_margin(p.tuning.sm_margin)) != FLASHBOX_OK) return true;
  PlanResult r = plan_sm90_forward(p);
  if (r.plan) {
    rc = run_plan(*r.plan);
    return true;
  }
  if (r.code != 0) {
    rc = fail(r.code, r.why_not);
    return true;
  }
#else
  (void)p, (void)rc;
#endif
  return false;
}

// The backward's counterpart (the same decision: sm90::dv_kernel, through the sm90 backward's plan,
// bwd_route.hpp bwd_kernel_head_dim_v). Declined (varlen and deterministic calls at head_dim > 128,
// strides the TMA cannot describe, a device that is not a Hopper): false, and the caller splits V,
// O and dO.
bool cuda_backward_native_head_dim_v(const GradProblem &g, int &rc) {
#ifdef FLASHBOX_HAVE_SM90
  const Problem &p = g.fwd;
  if (p.impl != FLASHBOX_AUTO && p.impl != FLASHBOX_FLASH) return false;
  if (sm90::dv_kernel(p.head_dim, p.head_dim_v) == nullptr || p.tuning.family == FLASHBOX_FAMILY_SM80) return false;
  if (!device_is_hopper()) return false;
  PlanResult r = plan_sm90_backward(g, false);
  if (r.plan) {
    rc = run_plan(*r.plan);
    return true;
  }
  if (r.code != 0) {
    rc = fail(r.code, r.why_not);
    return true;
  }
#else
  (void)g, (void)rc;
#endif
  return false;
}

namespace {
#endif

int forward(const flashbox_attention_args *args, const flashbox_options *options) {
  if (int rc = validate_forward_args(args)) return rc;
  Problem p = make_problem(*args);
  if (int rc = resolve_tuning(options, Pass::forward, p.tuning)) return rc;
#ifdef FLASHBOX_HAVE_CUDA
  if (p.device == FLASHBOX_CUDA) return cuda_forward(p);
#endif
  return cpu_forward(p);
}

}  // namespace
}  // namespace flashbox::detail

using namespace flashbox::detail;

extern "C" {

FLASHBOX_API int flashbox_attention_forward(const flashbox_attention_args *args) {
  return guarded_call("flashbox_attention_forward", [&] { return forward(args, nullptr); });
}

FLASHBOX_API int flashbox_attention_forward_opts(const flashbox_attention_args *args, const flashbox_options *options) {
  return guarded_call("flashbox_attention_forward_opts", [&] { return forward(args, options); });
}

FLASHBOX_API const char *flashbox_last_error(void) { return last_error(); }

FLASHBOX_API const char *flashbox_version(void) { return FLASHBOX_VERSION_STRING; }

FLASHBOX_API int flashbox_cuda_device_count(void) {
#ifdef FLASHBOX_HAVE_CUDA
  return cuda_device_count();
#else
  return 0;
#endif
}

FLASHBOX_API const char *flashbox_impl_name(flashbox_impl impl) {
  // A C caller may pass any int; read as the C++ enum, a value outside it is undefined behaviour.
  int value;
  std::memcpy(&value, &impl, sizeof value);
  switch (value) {
    case FLASHBOX_AUTO: return "auto";
    case FLASHBOX_NAIVE: return "naive";
    case FLASHBOX_BLOCKED: return "blocked";
    case FLASHBOX_FLASH: return "flash";
  }
  return "unknown";
}

FLASHBOX_API int64_t flashbox_last_scratch_peak_bytes(void) { return scratch_peak_bytes(); }

FLASHBOX_API const char *flashbox_last_kernel(void) { return kernel_name(); }

}  // extern "C"
