// The backward entry points: validate every argument with the forward's rules (src/api/validate.hpp)
// plus the backward's own (dout/dq/dk/dv tensors, lse required, gradients disjoint from each other
// and from every input, deterministic 0 or 1), normalise (GradProblem), then choose:
//   CPU:  auto -> blocked; naive; blocked            (src/cpu/attention_backward*.cpp)
//   CUDA: auto -> flash; flash: the Hopper family (src/cuda/backward/sm90) on compute capability 9.x
//         when its plan takes the call (a layout the TMA can describe; both dQ modes), else
//         the sm80 family (src/cuda/backward/sm80); options.family (or the private tuning
//         override backward_family) forces one.
// Nothing is written to dq/dk/dv before every check has passed.
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

namespace flashbox::detail {
namespace {

// dout and dv have rows of head_dim_v elements, as o and v do (0: head_dim).
TensorDesc tensor_dout(const flashbox_attention_grad_args &g, int64_t head_dim_v) {
  const flashbox_attention_args &a = g.fwd;
  if (head_dim_v == 0 || head_dim_v == a.head_dim)
    return {"dout", "dout_stride", g.dout, g.dout_stride, a.batch, a.seqlen_q, a.heads_q, a.head_dim};
  return {"dout", "dout_stride", g.dout, g.dout_stride, a.batch, a.seqlen_q, a.heads_q, head_dim_v, "head_dim_v"};
}
TensorDesc tensor_dq(const flashbox_attention_grad_args &g) {
  const flashbox_attention_args &a = g.fwd;
  return {"dq", "dq_stride", g.dq, g.dq_stride, a.batch, a.seqlen_q, a.heads_q, a.head_dim};
}
TensorDesc tensor_dk(const flashbox_attention_grad_args &g) {
  const flashbox_attention_args &a = g.fwd;
  return {"dk", "dk_stride", g.dk, g.dk_stride, a.batch, a.seqlen_k, a.heads_kv, a.head_dim};
}
TensorDesc tensor_dv(const flashbox_attention_grad_args &g, int64_t head_dim_v) {
  const flashbox_attention_args &a = g.fwd;
  if (head_dim_v == 0 || head_dim_v == a.head_dim)
    return {"dv", "dv_stride", g.dv, g.dv_stride, a.batch, a.seqlen_k, a.heads_kv, a.head_dim};
  return {"dv", "dv_stride", g.dv, g.dv_stride, a.batch, a.seqlen_k, a.heads_kv, head_dim_v, "head_dim_v"};
}

// Checks that need no pointer: enums, sizes, scale, causal, deterministic and what the device offers.
int validate_backward_scalars(const flashbox_attention_grad_args &g, int64_t head_dim_v = 0) {
  const flashbox_attention_args &a = g.fwd;
  if (int rc = validate_scalars(a, head_dim_v)) return rc;
  if (g.deterministic != 0 && g.deterministic != 1)
    return fail(FLASHBOX_ERR_INVALID_ARGUMENT,
                "deterministic = " + std::to_string(g.deterministic) + " must be 0 or 1");
  if (a.device == FLASHBOX_CUDA && a.impl == FLASHBOX_NAIVE)
    return fail(FLASHBOX_ERR_UNSUPPORTED_IMPL,
                "impl = naive has no backward on device = cuda (the cuda backward is auto = flash)");
  return validate_support(a, true);
}

}  // namespace

// Declared in validate.hpp (the extension's backward validates with it too).
int validate_backward_args(const flashbox_attention_grad_args *args, int64_t head_dim_v) {
  if (!args) return fail(FLASHBOX_ERR_NULL_POINTER, "args is NULL");
  const flashbox_attention_grad_args &g = *args;
  const flashbox_attention_args &a = g.fwd;
  if (int rc = validate_backward_scalars(g, head_dim_v)) return rc;

  const TensorDesc q = tensor_q(a), k = tensor_k(a), v = tensor_v(a, head_dim_v), o = tensor_o(a, head_dim_v);
  const TensorDesc dout = tensor_dout(g, head_dim_v);
  const TensorDesc dq = tensor_dq(g), dk = tensor_dk(g), dv = tensor_dv(g, head_dim_v);
  const TensorDesc *inputs[] = {&q, &k, &v, &o, &dout};
  const TensorDesc *grads[] = {&dq, &dk, &dv};
  for (const TensorDesc *t : inputs)
    if (int rc = validate_tensor(*t, a.dtype, a.device)) return rc;
  for (const TensorDesc *t : grads)
    if (int rc = validate_tensor(*t, a.dtype, a.device)) return rc;
  if (!a.lse)
    return fail(FLASHBOX_ERR_NULL_POINTER, "lse is NULL: the backward needs the forward's logsumexp (fwd.lse)");
  if (int rc = validate_lse(a.lse, "lse", a)) return rc;

  // Every gradient is disjoint from every input, from lse and from the other gradients.
  for (int i = 0; i < 3; ++i) {
    for (const TensorDesc *t : inputs)
      if (int rc = validate_disjoint(*grads[i], *t, a.dtype)) return rc;
    for (int j = i + 1; j < 3; ++j)
      if (int rc = validate_disjoint(*grads[i], *grads[j], a.dtype)) return rc;
    if (int rc = validate_lse_disjoint(a.lse, "lse", a, *grads[i])) return rc;
  }

  if (int rc = validate_device_available(a.device)) return rc;
  for (const TensorDesc *t : inputs)
    if (int rc = validate_device_pointer(t->ptr, t->name, a.device)) return rc;
  for (const TensorDesc *t : grads)
    if (int rc = validate_device_pointer(t->ptr, t->name, a.device)) return rc;
  return validate_device_pointer(a.lse, "lse", a.device);
}

namespace {

#ifdef FLASHBOX_HAVE_CUDA
// The family's plan for the call (size_only: the workspace query, which has no buffers yet).
PlanResult plan_family(flashbox_kernel_family f, const GradProblem &g, [[maybe_unused]] bool size_only) {
#ifdef FLASHBOX_HAVE_SM90
  if (f == FLASHBOX_FAMILY_SM90) {
    // The extension's mask families: the plan takes document ids and prefix-LM lengths and declines
    // the rest (bwd_route.hpp, mask_route_decline), which the sm80 family then runs.
    return plan_sm90_backward(g, size_only);
  }
#endif
  return f == FLASHBOX_FAMILY_SM80 ? plan_sm80_backward(g) : PlanResult::no(sm90_not_built());
}
#endif

}  // namespace

#ifdef FLASHBOX_HAVE_CUDA
int cuda_backward(const GradProblem &g) {
  return run_first_plan(g.fwd.tuning, "backward", [&](flashbox_kernel_family f) { return plan_family(f, g, false); });
}
#endif

namespace {

int backward(const flashbox_attention_grad_args *args, const flashbox_options *options) {
  if (int rc = validate_backward_args(args)) return rc;
  GradProblem g = make_grad_problem(*args);
#ifdef FLASHBOX_HAVE_CUDA
  if (g.fwd.device == FLASHBOX_CUDA) {
    if (int rc = resolve_tuning(options, Pass::backward, g.fwd.tuning)) return rc;
    return cuda_backward(g);
  }
#endif
  (void)options;
  return cpu_backward(g);
}

// The workspace the chosen family's plan would allocate, chosen as backward() chooses (without the
// buffers: TMA describability is not looked at, the layouts being unknown).
int64_t workspace_size(const flashbox_attention_grad_args *args, const flashbox_options *options) {
  if (!args) return -int64_t(fail(FLASHBOX_ERR_NULL_POINTER, "args is NULL"));
  if (int rc = validate_backward_scalars(*args)) return -int64_t(rc);
  GradProblem g = make_grad_problem(*args);
  if (g.fwd.device != FLASHBOX_CUDA) return cpu_backward_workspace_size(g);
#ifdef FLASHBOX_HAVE_CUDA
  if (int rc = resolve_tuning(options, Pass::backward, g.fwd.tuning)) return -int64_t(rc);
  // Sizes only: without a usable device the answer is the sm80 family's, as a call would fall back.
  const flashbox_kernel_family asked = g.fwd.tuning.family;
  if (asked == FLASHBOX_FAMILY_SM90 || (asked == FLASHBOX_FAMILY_AUTO && device_is_hopper())) {
    PlanResult r = plan_family(FLASHBOX_FAMILY_SM90, g, true);
    if (r.plan) return r.plan->workspace_bytes;
    if (asked == FLASHBOX_FAMILY_SM90) return -int64_t(declined(FLASHBOX_FAMILY_SM90, "backward", r));
  }
  PlanResult r = plan_family(FLASHBOX_FAMILY_SM80, g, true);
  if (!r.plan) return -int64_t(declined(FLASHBOX_FAMILY_SM80, "backward", r));
  return r.plan->workspace_bytes;
#else
  (void)options;
  return -int64_t(fail(FLASHBOX_ERR_NO_DEVICE, "device = cuda, but this flashbox was built without CUDA"));
#endif
}

}  // namespace
}  // namespace flashbox::detail

using namespace flashbox::detail;

extern "C" {

FLASHBOX_API int flashbox_attention_backward(const flashbox_attention_grad_args *args) {
  return guarded_call("flashbox_attention_backward", [&] { return backward(args, nullptr); });
}

FLASHBOX_API int flashbox_attention_backward_opts(const flashbox_attention_grad_args *args,
                                                  const flashbox_options *options) {
  return guarded_call("flashbox_attention_backward_opts", [&] { return backward(args, options); });
}

// Sizes only: pointers and strides are not looked at, so a caller can size the scratch before it
// has buffers. Negative (minus the error code) on invalid arguments, with flashbox_last_error() set.
// Not a forward/backward call: the last call's scratch peak and kernel name stay as they were.
FLASHBOX_API int64_t flashbox_attention_backward_workspace_size(const flashbox_attention_grad_args *args) {
  return flashbox_attention_backward_workspace_size_opts(args, nullptr);
}

FLASHBOX_API int64_t flashbox_attention_backward_workspace_size_opts(const flashbox_attention_grad_args *args,
                                                                     const flashbox_options *options) {
  try {
    return workspace_size(args, options);
  } catch (...) {
    return -int64_t(fail(FLASHBOX_ERR_INTERNAL, "flashbox_attention_backward_workspace_size: internal error"));
  }
}

}  // extern "C"
