// The extension's entry points (include/flashbox/flashbox.h, "Extension 1"): read and validate the
// extension struct (src/api/ext_validate.hpp), validate the plain arguments with the plain rules
// (varlen tensors as [1, total, heads, head_dim]), then
//   every field off (or only causal)   -> exactly the plain call (flashbox_attention_forward/backward);
//                                         head_dim_v = head_dim counts as off
//   attention_chunk, seqused_q/k, document ids, prefix lengths,
//   block_mask                         -> cpu: every level; cuda: the sm80 family, forward and
//                                         backward; the sm90 forward where its mask-family kernels
//                                         take the call (bf16, head_dim <= 128:
//                                         flash_fwd_sm90.cu), the sm90 backward where its mask
//                                         kernel takes it (bwd_route.hpp, mask_route_decline)
//   mask_mod                           -> cuda only: its bit tiles first (api/mask_mod_tiles.hpp),
//                                         then the families' kernels as for a block mask
//   qv                                 -> forward only; cpu: the levels on [q | qv] . [k | v]; cuda:
//                                         the explicit forward (src/cuda/explicit), any impl
//   head_dim_v != head_dim             -> cpu: the levels take it; cuda: the forward of a pair with a
//                                         Hopper kernel of its own (192 / 128) runs there, the rest on
//                                         column slices of V and O (src/api/head_dim_v_split.hpp)
//   dtype fp8 e4m3 (out_dtype, descales) -> forward only (src/api/fp8_args.hpp); q, k, v checked as
//                                         1-byte tensors, o in out_dtype; cpu: every level; cuda: the
//                                         sm90 fp8 forward (dispatch.cpp, cuda_fp8_forward), or refused
//                                         with its reason
//   device = cpu                       -> src/cpu/varlen_attention.cpp (masks, transforms, varlen)
//   device = cuda                      -> one Problem (mods and cu_seqlens in it) through the same
//                                         family choice as the plain call (src/api/dispatch.hpp); a
//                                         family that lacks a field declines, naming it
// Nothing is written on failure: every check runs before any backend.
#include <string>
#include <utility>
#include <vector>

#include "api/block_mask.hpp"
#include "api/dispatch.hpp"
#include "api/ext_validate.hpp"
#include "api/fp8_args.hpp"
#include "api/guarded_call.hpp"
#include "api/head_dim_v_split.hpp"
#include "api/mask_mod_tiles.hpp"
#include "api/options.hpp"
#include "api/validate.hpp"
#include "core/backends.hpp"
#include "core/error.hpp"
#include "core/softmax_scale.hpp"
#include "cpu/masked_levels.hpp"
#include "flashbox/flashbox.h"

namespace flashbox::detail {
namespace {

// The plain call is enough: no field beyond what flashbox_attention_args already says.
bool only_causal(const flashbox_attention_args &a, const flashbox_attention_ext &e) {
  flashbox_attention_ext x = e;
  if (a.causal == 1 && x.window_right == 0) x.window_right = -1;
  return ext_is_plain(x);
}

// `dim`: head_dim (dq, dk) or V's head dim (dv).
TensorDesc grad_desc(const char *name, void *p, const int64_t *stride, const flashbox_attention_args &a, bool kv,
                     int64_t dim) {
  return {name, "", p, stride, a.batch, kv ? a.seqlen_k : a.seqlen_q, kv ? a.heads_kv : a.heads_q, dim};
}

// dsink (a backward output) against the inputs it must not share a byte with: q, k, v, o, dout, lse
// (validate_ext_memory has checked it against dq, dk, dv and the sinks).
int check_dsink_disjoint(const flashbox_attention_grad_args &g, const flashbox_attention_ext &e, int64_t dv) {
  if (!e.dsink) return FLASHBOX_OK;
  const flashbox_attention_args &a = g.fwd;
  ByteView d;
  d.base = reinterpret_cast<uintptr_t>(e.dsink), d.run = a.heads_q * 4;
  const std::pair<const char *, ByteView> inputs[] = {
      {"q", tensor_view(tensor_q(a), a.dtype)},
      {"k", tensor_view(tensor_k(a), a.dtype)},
      {"v", tensor_view(tensor_v(a, dv), a.dtype)},
      {"o", tensor_view(tensor_o(a, dv), a.dtype)},
      {"dout", tensor_view(grad_desc("dout", const_cast<void *>(g.dout), g.dout_stride, a, false, dv), a.dtype)},
      {"lse", lse_view(a.lse, a)}};
  for (const auto &[name, view] : inputs)
    if (views_overlap(d, view).overlap)
      return fail(FLASHBOX_ERR_INVALID_ARGUMENT,
                  std::string("dsink overlaps ") + name + " in memory (an output may not share a byte with an input)");
  return FLASHBOX_OK;
}

// out_partial and lse_partial (forward outputs with num_splits): fp32-aligned, sizes within int64, and
// disjoint from each other, from o and lse, and from q, k, v.
int check_partials(const flashbox_attention_args &flat, const flashbox_attention_ext &e, int64_t dv,
                   flashbox_dtype out_dtype) {
  if (!e.out_partial) return FLASHBOX_OK;
  const flashbox_attention_args &a = flat;
  const __int128 rows = __int128(e.num_splits) * a.batch * a.seqlen_q * a.heads_q;
  if (rows * dv * 4 > __int128(INT64_MAX))
    return fail(FLASHBOX_ERR_SIZE_OVERFLOW, "out_partial's size (num_splits x batch x seqlen_q x heads_q x "
                                            "head_dim_v x 4 bytes) overflows int64");
  ByteView po, pl;
  po.base = reinterpret_cast<uintptr_t>(e.out_partial), po.run = int64_t(rows * dv * 4);
  pl.base = reinterpret_cast<uintptr_t>(e.lse_partial), pl.run = int64_t(rows * 4);
  const std::pair<const char *, ByteView> others[] = {{"q", tensor_view(tensor_q(a), a.dtype)},
                                                      {"k", tensor_view(tensor_k(a), a.dtype)},
                                                      {"v", tensor_view(tensor_v(a, dv), a.dtype)},
                                                      {"o", tensor_view(tensor_o(a, dv), out_dtype)},
                                                      {"lse", a.lse ? lse_view(a.lse, a) : ByteView{}},
                                                      {"lse_partial", pl}};
  for (const auto &[part, view] : {std::pair<const char *, ByteView>{"out_partial", po}, {"lse_partial", pl}}) {
    if (view.base % 4 != 0)
      return fail(FLASHBOX_ERR_MISALIGNED, std::string(part) + " is not 4-byte aligned (fp32)");
    for (const auto &[name, other] : others)
      if (other.base && std::string(name) != part && views_overlap(view, other).overlap)
        return fail(FLASHBOX_ERR_INVALID_ARGUMENT, std::string(part) + " overlaps " + name +
                                                       " in memory (an output may not share a byte with another "
                                                       "buffer of the call)");
  }
  return FLASHBOX_OK;
}

// The call's mods with the block mask's dense table (owned by `kinds`) when the extension has one.
int cpu_mods(const flashbox_attention_args &a, const flashbox_attention_ext &e, const ByteView *outputs,
             const char *const *names, int n, std::vector<uint8_t> &kinds, core::ScoreMods &mods) {
  mods = ext_mods(a, e);
  if (!e.block_mask) return FLASHBOX_OK;
  return build_block_table(a, *e.block_mask, outputs, names, n, kinds, mods.blocks);
}

#ifdef FLASHBOX_HAVE_CUDA
// The extension's fields onto a problem built from the plain view (varlen: batch = the sequences).
void add_ext(Problem &p, const flashbox_attention_args &a, const flashbox_attention_ext &e) {
  p.batch = a.batch;
  if (ext_is_varlen(e)) {
    p.cu_seqlens_q = e.cu_seqlens_q, p.cu_seqlens_k = e.cu_seqlens_k;
    p.max_seqlen_q = e.max_seqlen_q, p.max_seqlen_k = e.max_seqlen_k;
  }
  p.seqused_q = e.seqused_q, p.seqused_k = e.seqused_k;
  if (e.block_mask) p.block_mask = *e.block_mask;
}

int cuda_forward_ext(const flashbox_attention_args &a, const flashbox_attention_args &flat,
                     const flashbox_attention_ext &e) {
  Problem p = make_problem(flat, ext_mods(a, e), e.head_dim_v);
  add_ext(p, a, e);
  if (p.dtype == FLASHBOX_FLOAT8_E4M3) {
    p.out_dtype = e.out_dtype;
    p.q_descale = e.q_descale, p.k_descale = e.k_descale, p.v_descale = e.v_descale;
    for (int i = 0; i < 2; ++i) {
      p.q_descale_stride[i] = e.q_descale_stride[i], p.k_descale_stride[i] = e.k_descale_stride[i];
      p.v_descale_stride[i] = e.v_descale_stride[i];
    }
  }
  // Validation refuses the cpu-only fields on cuda (src/api/ext_validate.cpp; none today); the
  // kernels know none of them, so this is asserted once more before any launch.
  if (!ext_cpu_only_field(e).empty())
    return fail(FLASHBOX_ERR_INTERNAL, "flashbox_attention_forward_ext: a cpu-only field reached the CUDA backends");
  if (e.qv) {
    // scale * (q . k + qv . v): softmax_scale 0 means 1/sqrt(head_dim + head_dim_v) (FlashAttention-3).
    if (a.softmax_scale == 0.0f) {
      const SoftmaxScale s = resolve_softmax_scale(0.0f, p.head_dim + p.head_dim_v);
      p.scale = s.scale, p.scale_log2 = s.scale_log2;
    }
    return cuda_explicit_forward(p, e.qv, e.qv_stride);
  }
  if (int rc = resolve_tuning(nullptr, Pass::forward, p.tuning)) return rc;
  // seqused_q with head_dim_v != head_dim: the tiled kernels' column slices write o through scratch
  // (head_dim_v_split.hpp), so rows past seqused_q would not keep what they held; the explicit forward
  // writes o in place and takes seqused, windows, softcap, ALiBi and sinks, but no mask family.
  if (p.head_dim_v != p.head_dim && p.seqused_q) {
    const std::string family = e.mask_mod                   ? "mask mods (mask_mod)"
                               : p.mods.doc_q                 ? "document masks (document_ids_q/k)"
                               : p.mods.prefix                ? "prefix-LM masks (prefix_lengths)"
                               : p.block_mask.kv_num_blocks   ? "block masks (block_mask)"
                                                              : "";
    if (!family.empty() || p.dtype == FLASHBOX_FLOAT8_E4M3)
      return fail(FLASHBOX_ERR_UNSUPPORTED_IMPL,
                  "seqused_q with head_dim_v != head_dim runs on the CUDA explicit forward, which has no " +
                      (family.empty() ? std::string("fp8 inputs") : family) + " (it runs on device = cpu)");
    return cuda_explicit_forward(p, nullptr, nullptr);
  }
  // A mask mod's bit tiles (and block mask) are written into scratch first; the attention kernels
  // read them, so the scratch lives until they are launched.
  MaskModScratch mod_scratch(p.stream);
  if (e.mask_mod)
    if (int rc = attach_mask_mod(p, e, mod_scratch)) return rc;
  // After the mod's bit tiles are attached, so that the fp8 plan sees (and declines) a mask mod.
  if (p.dtype == FLASHBOX_FLOAT8_E4M3) return cuda_fp8_forward(p);
  return p.head_dim_v != p.head_dim ? cuda_forward_head_dim_v(p) : cuda_forward(p);
}

int cuda_backward_ext(const flashbox_attention_grad_args &g, const flashbox_attention_grad_args &flat,
                      const flashbox_attention_ext &e) {
  GradProblem p = make_grad_problem(flat, ext_mods(g.fwd, e), e.head_dim_v);
  add_ext(p.fwd, g.fwd, e);
  p.dsink = e.dsink;
  // The cpu-only fields, asserted once more before any launch, as for the forward.
  if (!ext_cpu_only_field(e).empty())
    return fail(FLASHBOX_ERR_INTERNAL, "flashbox_attention_backward_ext: a cpu-only field reached the CUDA backends");
  if (int rc = resolve_tuning(nullptr, Pass::backward, p.fwd.tuning)) return rc;
  MaskModScratch mod_scratch(p.fwd.stream);  // as in the forward
  if (e.mask_mod)
    if (int rc = attach_mask_mod(p.fwd, e, mod_scratch)) return rc;
  return p.fwd.head_dim_v != p.fwd.head_dim ? cuda_backward_head_dim_v(p) : cuda_backward(p);
}
#endif

}  // namespace
}  // namespace flashbox::detail

using namespace flashbox::detail;

extern "C" {

FLASHBOX_API flashbox_attention_ext flashbox_attention_ext_default(void) {
  flashbox_attention_ext e{};
  e.struct_size = int32_t(sizeof e);
  e.window_left = e.window_right = -1;
  return e;
}

FLASHBOX_API int flashbox_attention_forward_ext(const flashbox_attention_args *args,
                                                const flashbox_attention_ext *ext) {
  return guarded_call("flashbox_attention_forward_ext", [&]() -> int {
    if (!args) return fail(FLASHBOX_ERR_NULL_POINTER, "args is NULL");
    flashbox_attention_ext e;
    if (int rc = read_ext(ext, e)) return rc;
    if (int rc = validate_ext_fields(*args, e, Pass::forward)) return rc;
    if (only_causal(*args, e)) return flashbox_attention_forward(args);
    const flashbox_attention_args flat = plain_view(*args, e);
    if (int rc = is_fp8_call(flat) ? validate_forward_args(flat, e.head_dim_v, e.out_dtype)
                                   : validate_forward_args(&flat, e.head_dim_v))
      return rc;
    const flashbox_dtype out_dtype = ext_out_dtype(*args, e);  // o's (out_dtype for fp8 inputs), now valid
    const ByteView outputs[2] = {tensor_view(tensor_o(flat, e.head_dim_v), out_dtype),
                                 flat.lse ? lse_view(flat.lse, flat) : ByteView{}};
    const char *const names[2] = {"o", "lse"};
    if (int rc = validate_ext_memory(*args, e, outputs, names, 2)) return rc;
    if (int rc = check_partials(flat, e, ext_head_dim_v(*args, e), out_dtype)) return rc;
    std::vector<uint8_t> kinds;
    flashbox::core::ScoreMods mods;
    if (int rc = cpu_mods(*args, e, outputs, names, 2, kinds, mods)) return rc;
#ifdef FLASHBOX_HAVE_CUDA
    if (args->device == FLASHBOX_CUDA) return cuda_forward_ext(*args, flat, e);
#endif
    if (args->device != FLASHBOX_CPU)
      return fail(FLASHBOX_ERR_INTERNAL, "flashbox_attention_forward_ext: no backend for these fields on this device");
    return cpu_forward_ext(*args, e, mods);
  });
}

FLASHBOX_API int flashbox_attention_backward_ext(const flashbox_attention_grad_args *args,
                                                 const flashbox_attention_ext *ext) {
  return guarded_call("flashbox_attention_backward_ext", [&]() -> int {
    if (!args) return fail(FLASHBOX_ERR_NULL_POINTER, "args is NULL");
    flashbox_attention_ext e;
    if (int rc = read_ext(ext, e)) return rc;
    if (int rc = validate_ext_fields(args->fwd, e, Pass::backward)) return rc;
    if (only_causal(args->fwd, e)) return flashbox_attention_backward(args);
    flashbox_attention_grad_args flat = *args;
    flat.fwd = plain_view(args->fwd, e);
    if (int rc = validate_backward_args(&flat, e.head_dim_v)) return rc;
    const flashbox_attention_args &a = flat.fwd;
    const int64_t dv = ext_head_dim_v(a, e);
    const ByteView outputs[3] = {tensor_view(grad_desc("dq", flat.dq, flat.dq_stride, a, false, a.head_dim), a.dtype),
                                 tensor_view(grad_desc("dk", flat.dk, flat.dk_stride, a, true, a.head_dim), a.dtype),
                                 tensor_view(grad_desc("dv", flat.dv, flat.dv_stride, a, true, dv), a.dtype)};
    const char *const names[3] = {"dq", "dk", "dv"};
    if (int rc = validate_ext_memory(args->fwd, e, outputs, names, 3)) return rc;
    if (int rc = check_dsink_disjoint(flat, e, dv)) return rc;
    std::vector<uint8_t> kinds;
    flashbox::core::ScoreMods mods;
    if (int rc = cpu_mods(args->fwd, e, outputs, names, 3, kinds, mods)) return rc;
#ifdef FLASHBOX_HAVE_CUDA
    if (args->fwd.device == FLASHBOX_CUDA) return cuda_backward_ext(*args, flat, e);
#endif
    if (args->fwd.device != FLASHBOX_CPU)
      return fail(FLASHBOX_ERR_INTERNAL, "flashbox_attention_backward_ext: no backend for these fields on this device");
    return cpu_backward_ext(*args, e, mods);
  });
}

}  // extern "C"
