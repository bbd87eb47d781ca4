// The backward entry points: validate every argument with the forward's rules (src/api/validate.hpp)
// plus the backward's own (dout/dq/dk/dv tensors, lse required, gradients disjoint from each other
// and from every input, deterministic 0 or 1), then dispatch:
//   CPU:  auto -> blocked; naive; blocked            (src/cpu/attention_backward*.cpp)
//   CUDA: auto -> flash; flash                       (src/cuda/backward)
// Nothing is written to dq/dk/dv before every check has passed.
#include <string>

#include "api/backends.hpp"
#include "core/call_state.hpp"
#include "core/error.hpp"
#include "api/guarded_call.hpp"
#include "api/validate.hpp"
#include "cpu/attention_backward.hpp"
#include "flashbox/flashbox.h"

namespace flashbox::detail {
namespace {

TensorDesc tensor_dout(const flashbox_attention_grad_args &g) {
  const flashbox_attention_args &a = g.fwd;
  return {"dout", "dout_stride", g.dout, g.dout_stride, a.batch, a.seqlen_q, a.heads_q, a.head_dim};
}
TensorDesc tensor_dq(const flashbox_attention_grad_args &g) {
  const flashbox_attention_args &a = g.fwd;
  return {"dq", "dq_stride", g.dq, g.dq_stride, a.batch, a.seqlen_q, a.heads_q, a.head_dim};
}
TensorDesc tensor_dk(const flashbox_attention_grad_args &g) {
  const flashbox_attention_args &a = g.fwd;
  return {"dk", "dk_stride", g.dk, g.dk_stride, a.batch, a.seqlen_k, a.heads_kv, a.head_dim};
}
TensorDesc tensor_dv(const flashbox_attention_grad_args &g) {
  const flashbox_attention_args &a = g.fwd;
  return {"dv", "dv_stride", g.dv, g.dv_stride, a.batch, a.seqlen_k, a.heads_kv, a.head_dim};
}

// Checks that need no pointer: enums, sizes, scale, causal, deterministic and what the device offers.
int validate_backward_scalars(const flashbox_attention_grad_args &g) {
  const flashbox_attention_args &a = g.fwd;
  if (int rc = validate_scalars(a)) return rc;
  if (g.deterministic != 0 && g.deterministic != 1)
    return fail(FLASHBOX_ERR_INVALID_ARGUMENT, "deterministic = " + std::to_string(g.deterministic) + " must be 0 or 1");
  if (a.device == FLASHBOX_CUDA && a.impl == FLASHBOX_NAIVE)
    return fail(FLASHBOX_ERR_UNSUPPORTED_IMPL,
                "impl = naive has no backward on device = cuda (the cuda backward is auto = flash)");
  return validate_support(a);
}

}  // namespace

// Declared in validate.hpp (the extension's backward validates with it too).
int validate_backward_args(const flashbox_attention_grad_args *args) {
  if (!args) return fail(FLASHBOX_ERR_NULL_POINTER, "args is NULL");
  const flashbox_attention_grad_args &g = *args;
  const flashbox_attention_args &a = g.fwd;
  if (int rc = validate_backward_scalars(g)) return rc;

  const TensorDesc q = tensor_q(a), k = tensor_k(a), v = tensor_v(a), o = tensor_o(a), dout = tensor_dout(g);
  const TensorDesc dq = tensor_dq(g), dk = tensor_dk(g), dv = tensor_dv(g);
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

}  // namespace flashbox::detail

using namespace flashbox::detail;

extern "C" {

FLASHBOX_API int flashbox_attention_backward(const flashbox_attention_grad_args *args) {
  return guarded_call("flashbox_attention_backward", [&]() -> int {
    if (int rc = validate_backward_args(args)) return rc;
#ifdef FLASHBOX_HAVE_CUDA
    if (args->fwd.device == FLASHBOX_CUDA) return cuda_flash_backward(*args);
#endif
    return cpu_backward(*args);
  });
}

// Sizes only: pointers and strides are not looked at, so a caller can size the scratch before it
// has buffers. Negative (minus the error code) on invalid arguments, with flashbox_last_error() set.
// Not a forward/backward call: the last call's scratch peak and kernel name stay as they were.
FLASHBOX_API int64_t flashbox_attention_backward_workspace_size(const flashbox_attention_grad_args *args) {
  try {
    if (!args) return -int64_t(fail(FLASHBOX_ERR_NULL_POINTER, "args is NULL"));
    if (int rc = validate_backward_scalars(*args)) return -int64_t(rc);
#ifdef FLASHBOX_HAVE_CUDA
    if (args->fwd.device == FLASHBOX_CUDA) return cuda_backward_workspace_size(*args);
#else
    if (args->fwd.device == FLASHBOX_CUDA)
      return -int64_t(fail(FLASHBOX_ERR_NO_DEVICE, "device = cuda, but this flashbox was built without CUDA"));
#endif
    return flashbox::cpu::backward::scratch_bytes(*args);
  } catch (...) {
    return -int64_t(fail(FLASHBOX_ERR_INTERNAL, "flashbox_attention_backward_workspace_size: internal error"));
  }
}

}  // extern "C"
