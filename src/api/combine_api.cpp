// flashbox_attention_combine: validation and dispatch of the combine of split partial results
// (include/flashbox/flashbox.h). Rules, in order; each failure names the argument and nothing is
// written:
//   struct    args not NULL; struct_size == sizeof(flashbox_combine_args)
//   enums     device; out_dtype fp32, fp16 or bf16
//   sizes     num_splits, batch, seqlen, heads, head_dim_v >= 1
//   device    cpu, or cuda with a visible device
//   inputs    out_partial and lse_partial not NULL, 4-byte aligned, strides > 0, extents within int64
//   outputs   out as an attention output tensor (pointer, strides, no self-overlap, alignment); lse
//             NULL or 4-byte aligned; out and lse overlap neither each other nor an input
#include <string>

#include "api/arg_text.hpp"
#include "api/guarded_call.hpp"
#include "api/overlap.hpp"
#include "api/validate.hpp"
#include "core/call_state.hpp"
#include "core/enum_bits.hpp"
#include "core/error.hpp"
#include "cpu/combine.hpp"
#ifdef FLASHBOX_HAVE_CUDA
#include "cuda/combine/combine_partials.hpp"
#endif

namespace flashbox::detail {
namespace {

// A fp32 input of `dims` strided dims (the last `run` elements contiguous): pointer, alignment,
// strides and its extent in bytes within int64. The byte view the overlap checks compare.
int check_input(const float *p, const char *name, const int64_t *stride, const int64_t *extent, int dims, int64_t run,
                ByteView &view) {
  if (!p) return fail(FLASHBOX_ERR_NULL_POINTER, std::string(name) + " is NULL");
  if (reinterpret_cast<uintptr_t>(p) % 4 != 0)
    return fail(FLASHBOX_ERR_MISALIGNED, std::string(name) + " is not 4-byte aligned (fp32)");
  __int128 span = run;
  for (int i = 0; i < dims; ++i) {
    if (stride[i] <= 0)
      return fail(FLASHBOX_ERR_BAD_STRIDE,
                  std::string(name) + "_stride[" + str(i) + "] = " + str(stride[i]) + " must be > 0");
    span += __int128(extent[i] - 1) * stride[i];
  }
  if (span * 4 > __int128(INT64_MAX))
    return fail(FLASHBOX_ERR_SIZE_OVERFLOW, std::string("the extent of ") + name + " overflows int64");
  view = ByteView{};
  view.base = reinterpret_cast<uintptr_t>(p);
  view.run = run * 4;
  view.ndims = dims;
  for (int i = 0; i < dims; ++i)
    view.stride[i] = extent[i] > 1 ? stride[i] * 4 : view.run, view.extent[i] = extent[i];
  return FLASHBOX_OK;
}

int disjoint(const ByteView &out, const char *out_name, const ByteView &in, const char *in_name) {
  const OverlapAnswer ans = views_overlap(out, in);
  if (!ans.overlap) return FLASHBOX_OK;
  return fail(FLASHBOX_ERR_INVALID_ARGUMENT,
              std::string(out_name) + " overlaps " + in_name + " in memory" +
                  (ans.exact ? " (an output may not share an element with an input or another output)"
                             : " (or the overlap test gave up on these strides; lay them out plainly)"));
}

int validate_combine(const flashbox_combine_args *a) {
  if (!a) return fail(FLASHBOX_ERR_NULL_POINTER, "args is NULL");
  if (a->struct_size != int32_t(sizeof(flashbox_combine_args)))
    return fail(FLASHBOX_ERR_INVALID_ARGUMENT, "args->struct_size = " + str(a->struct_size) + " must be " +
                                                   str(int64_t(sizeof(flashbox_combine_args))) +
                                                   " (sizeof(flashbox_combine_args))");
  const int device = core::enum_bits(a->device), dtype = core::enum_bits(a->out_dtype);
  if (device != FLASHBOX_CPU && device != FLASHBOX_CUDA)
    return fail(FLASHBOX_ERR_UNSUPPORTED_IMPL, "device = " + str(device) + " is not a flashbox_device");
  if (dtype != FLASHBOX_FLOAT32 && dtype != FLASHBOX_FLOAT16 && dtype != FLASHBOX_BFLOAT16)
    return fail(FLASHBOX_ERR_UNSUPPORTED_DTYPE, "out_dtype = " + str(dtype) + " is not fp32 (0), fp16 (1) or bf16 (2)");
  const std::pair<const char *, int64_t> sizes[] = {{"num_splits", a->num_splits}, {"batch", a->batch},
                                                    {"seqlen", a->seqlen},         {"heads", a->heads},
                                                    {"head_dim_v", a->head_dim_v}};
  for (const auto &[name, v] : sizes)
    if (v < 1) return fail(FLASHBOX_ERR_INVALID_SIZE, std::string(name) + " = " + str(v) + " must be >= 1");
  if (int rc = validate_device_available(a->device)) return rc;
  ByteView op, lp;
  const int64_t op_extent[4] = {a->num_splits, a->batch, a->seqlen, a->heads};
  if (int rc = check_input(a->out_partial, "out_partial", a->out_partial_stride, op_extent, 4, a->head_dim_v, op))
    return rc;
  const int64_t lp_extent[4] = {a->num_splits, a->batch, a->seqlen, a->heads};
  if (int rc = check_input(a->lse_partial, "lse_partial", a->lse_partial_stride, lp_extent, 4, 1, lp)) return rc;
  TensorDesc out{"out", "out_stride", a->out, a->out_stride, a->batch, a->seqlen, a->heads, a->head_dim_v};
  out.head_dim_name = "head_dim_v";
  if (int rc = validate_tensor(out, a->out_dtype, a->device)) return rc;
  const ByteView ov = tensor_view(out, a->out_dtype);
  if (int rc = disjoint(ov, "out", op, "out_partial")) return rc;
  if (int rc = disjoint(ov, "out", lp, "lse_partial")) return rc;
  if (a->lse) {
    const int64_t n = a->batch * a->heads * a->seqlen;
    const int64_t one = 1;
    ByteView lv;
    if (int rc = check_input(a->lse, "lse", &one, &one, 1, n, lv)) return rc;
    if (int rc = disjoint(lv, "lse", op, "out_partial")) return rc;
    if (int rc = disjoint(lv, "lse", lp, "lse_partial")) return rc;
    if (int rc = disjoint(ov, "out", lv, "lse")) return rc;
  }
  const std::pair<const void *, const char *> pointers[] = {
      {a->out_partial, "out_partial"}, {a->lse_partial, "lse_partial"}, {a->out, "out"}, {a->lse, "lse"}};
  for (const auto &[ptr, name] : pointers)
    if (int rc = validate_device_pointer(ptr, name, a->device)) return rc;
  return FLASHBOX_OK;
}

}  // namespace
}  // namespace flashbox::detail

using namespace flashbox::detail;

extern "C" FLASHBOX_API int flashbox_attention_combine(const flashbox_combine_args *args) {
  return guarded_call("flashbox_attention_combine", [&]() -> int {
    if (int rc = validate_combine(args)) return rc;
#ifdef FLASHBOX_HAVE_CUDA
    if (args->device == FLASHBOX_CUDA) {
      if (int rc = flashbox::cuda::combine_partials(*args)) return rc;
      set_kernel_name("cuda_combine");
      return FLASHBOX_OK;
    }
#endif
    flashbox::cpu::combine_partials(*args);
    set_kernel_name("cpu_combine");
    return FLASHBOX_OK;
  });
}
