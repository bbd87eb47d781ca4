// Validation of flashbox_attention_ext; the order and the rules are listed in ext_validate.hpp.
#include "api/ext_validate.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <string>

#include "api/arg_text.hpp"
#include "api/fp8_args.hpp"
#include "api/mod_api.hpp"
#include "api/validate.hpp"
#include "core/enum_bits.hpp"
#include "core/error.hpp"
#include "core/explicit_limits.hpp"

namespace flashbox::detail {
namespace {

constexpr int32_t kExtSize = int32_t(sizeof(flashbox_attention_ext));
// The struct's versions, oldest first: 0.2.0's ended before head_dim_v; each later one ends after a
// group of added fields (kExtSizeNames), the last is the whole struct. A caller's struct_size may be
// any of them; the fields its version lacks read as 0.
constexpr int32_t kExtV1Size = int32_t(offsetof(flashbox_attention_ext, head_dim_v));
constexpr int32_t kExtSizes[] = {kExtV1Size,
                                 int32_t(offsetof(flashbox_attention_ext, attention_chunk)),
                                 int32_t(offsetof(flashbox_attention_ext, qv)),
                                 int32_t(offsetof(flashbox_attention_ext, learnable_sink)),
                                 int32_t(offsetof(flashbox_attention_ext, num_splits)),
                                 int32_t(offsetof(flashbox_attention_ext, document_ids_q)),
                                 int32_t(offsetof(flashbox_attention_ext, out_dtype)),
                                 int32_t(offsetof(flashbox_attention_ext, mask_mod)),
                                 int32_t(offsetof(flashbox_attention_ext, mask_mod_broadcast)),
                                 kExtSize};
const char *const kExtSizeNames[] = {"the struct of flashbox 0.2.0",
                                     "with head_dim_v",
                                     "with seqused_k",
                                     "with qv",
                                     "with dsink",
                                     "with lse_partial",
                                     "with block_mask",
                                     "with v_descale_stride",
                                     "with score_mod_aux",
                                     "sizeof(flashbox_attention_ext)"};
constexpr int32_t kExtMaxSize = 4096;  // a struct_size beyond this is taken for garbage, not a newer struct

// No output of the call shares a byte with `in` (a buffer named `name` at `p`).
int check_outputs_disjoint(const ByteView &in, const void *p, const char *name, const ByteView *outputs,
                           const char *const *output_names, int n_outputs) {
  for (int i = 0; i < n_outputs; ++i) {
    if (!outputs[i].base) continue;
    const OverlapAnswer ans = views_overlap(outputs[i], in);
    if (ans.overlap)
      return fail(FLASHBOX_ERR_INVALID_ARGUMENT, std::string(output_names[i]) + " = " +
                                                     ptr_str(reinterpret_cast<const void *>(outputs[i].base)) +
                                                     " overlaps " + name + " = " + ptr_str(p) +
                                                     " in memory (an output may not share an element with an input)");
  }
  return FLASHBOX_OK;
}

}  // namespace

int check_input_buffer(const void *p, int64_t bytes, const char *name, const ByteView *outputs,
                       const char *const *output_names, int n_outputs) {
  if (reinterpret_cast<uintptr_t>(p) % 4 != 0)
    return fail(FLASHBOX_ERR_MISALIGNED, std::string(name) + " = " + ptr_str(p) + " is not 4-byte aligned");
  ByteView in;
  in.base = reinterpret_cast<uintptr_t>(p);
  in.run = bytes;
  return check_outputs_disjoint(in, p, name, outputs, output_names, n_outputs);
}

namespace {

// cu_seqlens on the host: 0 first, non-decreasing, the total last, every length within max_seqlen.
int check_cu_seqlens(const int32_t *cu, int64_t batch, int64_t total, int64_t max_seqlen, const char *which) {
  const std::string name = std::string("cu_seqlens_") + which;
  if (cu[0] != 0) return fail(FLASHBOX_ERR_INVALID_ARGUMENT, name + "[0] = " + str(cu[0]) + " must be 0");
  int64_t longest = 0, longest_at = 0;
  for (int64_t b = 0; b < batch; ++b) {
    if (cu[b + 1] < cu[b])
      return fail(FLASHBOX_ERR_INVALID_ARGUMENT, name + "[" + str(b + 1) + "] = " + str(cu[b + 1]) + " is less than " +
                                                     name + "[" + str(b) + "] = " + str(cu[b]) +
                                                     " (prefix sums of lengths never decrease)");
    if (cu[b + 1] - cu[b] > longest) longest = cu[b + 1] - cu[b], longest_at = b;
  }
  if (cu[batch] != total)
    return fail(FLASHBOX_ERR_INVALID_ARGUMENT, name + "[batch = " + str(batch) + "] = " + str(cu[batch]) +
                                                   " must equal seqlen_" + which + " = " + str(total) +
                                                   " (the total token count of the packed tensors)");
  if (longest > max_seqlen)
    return fail(FLASHBOX_ERR_INVALID_ARGUMENT, std::string("max_seqlen_") + which + " = " + str(max_seqlen) +
                                                   " is less than the length " + str(longest) + " of sequence " +
                                                   str(longest_at) + " (" + name + ")");
  return FLASHBOX_OK;
}

}  // namespace

int read_ext(const flashbox_attention_ext *ext, flashbox_attention_ext &out) {
  out = flashbox_attention_ext{};
  out.struct_size = kExtSize;
  out.window_left = out.window_right = -1;
  if (!ext) return FLASHBOX_OK;
  const int32_t size = ext->struct_size;
  if (size < kExtV1Size)
    return fail(FLASHBOX_ERR_INVALID_ARGUMENT, "ext->struct_size = " + str(size) + " is less than " + str(kExtV1Size) +
                                                   ", the size of the first flashbox_attention_ext (set it to "
                                                   "sizeof(flashbox_attention_ext))");
  if (size < kExtSize && std::find(std::begin(kExtSizes), std::end(kExtSizes), size) == std::end(kExtSizes)) {
    std::string known;
    for (size_t i = 0; i < std::size(kExtSizes); ++i)
      known += (i ? "; " : "") + str(kExtSizes[i]) + ": " + kExtSizeNames[i];
    return fail(FLASHBOX_ERR_INVALID_ARGUMENT,
                "ext->struct_size = " + str(size) + " ends inside a field (" + known + ")");
  }
  if (size > kExtMaxSize)
    return fail(FLASHBOX_ERR_INVALID_ARGUMENT, "ext->struct_size = " + str(size) + " is not a plausible size (" +
                                                   str(kExtSize) + " for this flashbox " FLASHBOX_VERSION_STRING ")");
  const auto *bytes = reinterpret_cast<const unsigned char *>(ext);
  for (int32_t i = kExtSize; i < size; ++i)
    if (bytes[i] != 0)
      return fail(FLASHBOX_ERR_INVALID_ARGUMENT,
                  "ext->struct_size = " + str(size) + " and byte " + str(i) +
                      " is set: the caller uses fields this flashbox " FLASHBOX_VERSION_STRING
                      " does not know (it knows " +
                      str(kExtSize) + " bytes)");
  std::memcpy(&out, ext, size_t(std::min(size, kExtSize)));  // a shorter, older struct: the rest stays 0
  out.struct_size = kExtSize;
  return FLASHBOX_OK;
}

bool ext_is_varlen(const flashbox_attention_ext &e) { return e.cu_seqlens_q && e.cu_seqlens_k; }

bool ext_is_plain(const flashbox_attention_ext &e) {
  return e.window_left == -1 && e.window_right == -1 && e.softcap == 0.0f && !e.alibi_slopes && !e.cu_seqlens_q &&
         !e.cu_seqlens_k && e.max_seqlen_q == 0 && e.max_seqlen_k == 0 && e.head_dim_v == 0 && e.attention_chunk == 0 &&
         !e.seqused_q && !e.seqused_k && !e.qv && !e.learnable_sink && !e.dsink && e.num_splits <= 1 &&
         !e.out_partial && !e.lse_partial && !e.document_ids_q && !e.document_ids_k && !e.prefix_lengths &&
         !e.block_mask && core::enum_bits(e.out_dtype) == 0 && !e.q_descale && !e.k_descale && !e.v_descale && !e.mask_mod && !e.mask_mod_aux && !e.score_mod &&
         !e.score_mod_aux && e.mask_mod_broadcast == 0;
}

std::string ext_cpu_only_field(const flashbox_attention_ext &e) {
  // attention_chunk, seqused, document ids, prefix lengths and block masks run on cuda in the sm80
  // family (the other families decline them: src/api/dispatch.cpp); qv on the explicit forward
  // (src/cuda/explicit); fp8 e4m3 inputs in the sm90 fp8 forward (src/api/dispatch.cpp,
  // cuda_fp8_forward). No field is cpu-only today: a field added for the cpu first is named here.
  (void)e;
  return "";
}

int64_t ext_head_dim_v(const flashbox_attention_args &a, const flashbox_attention_ext &e) {
  return e.head_dim_v != 0 ? e.head_dim_v : a.head_dim;
}

int validate_ext_fields(const flashbox_attention_args &a, flashbox_attention_ext &e, Pass pass) {
  if (int rc = validate_fp8_fields(a, e, pass)) return rc;  // folds out_dtype = dtype to 0
  // head_dim_v: 0 and head_dim are the same request; it is folded to 0 so that everything below
  // (and ext_is_plain) sees the call as the plain one.
  if (e.head_dim_v < 0)
    return fail(FLASHBOX_ERR_INVALID_SIZE,
                "head_dim_v = " + str(e.head_dim_v) + " must be >= 0 (0: head_dim_v = head_dim)");
  if (e.head_dim_v == a.head_dim) e.head_dim_v = 0;
  // device = cuda takes any head_dim_v: the kernels run on column slices of V and O
  // (src/api/head_dim_v_split.hpp).
  if (e.head_dim_v != 0 && a.device == FLASHBOX_CPU && e.head_dim_v > kCpuMaxHeadDim)
    return fail(FLASHBOX_ERR_UNSUPPORTED_HEAD_DIM, "head_dim_v = " + str(e.head_dim_v) +
                                                       " is not supported on device = cpu (1.." +
                                                       str(kCpuMaxHeadDim) + ")");
  if (e.attention_chunk < 0)
    return fail(FLASHBOX_ERR_INVALID_ARGUMENT,
                "attention_chunk = " + str(e.attention_chunk) + " must be >= 0 (0: off)");
  if (e.qv && pass == Pass::backward)
    return fail(FLASHBOX_ERR_UNSUPPORTED_IMPL,
                "qv is set: the backward takes no qv (as FlashAttention-3's; qv is a forward-only input)");
  if (e.num_splits < 0 || e.num_splits > 256)
    return fail(FLASHBOX_ERR_INVALID_ARGUMENT,
                "num_splits = " + str(e.num_splits) + " must be within 0..256 (0 or 1: the keys in one part)");
  if (bool(e.out_partial) != bool(e.lse_partial))
    return fail(FLASHBOX_ERR_NULL_POINTER, std::string(e.out_partial ? "lse_partial" : "out_partial") +
                                               " is NULL but " + (e.out_partial ? "out_partial" : "lse_partial") +
                                               " is set (the parts' outputs need both)");
  if (e.out_partial && e.num_splits <= 1)
    return fail(FLASHBOX_ERR_INVALID_ARGUMENT,
                "out_partial is set but num_splits = " + str(e.num_splits) + " (partial outputs need num_splits > 1)");
  if (e.num_splits > 1) {
    if (pass == Pass::backward)
      return fail(FLASHBOX_ERR_UNSUPPORTED_IMPL, "num_splits = " + str(e.num_splits) +
                                                     ": the backward takes no split (num_splits is a forward field)");
    if (a.device == FLASHBOX_CUDA)
      return fail(FLASHBOX_ERR_UNSUPPORTED_IMPL, "num_splits = " + str(e.num_splits) +
                                                     ": the CUDA kernels do not take it yet; it runs on device = cpu");
    if (e.seqused_q || e.seqused_k || e.learnable_sink)
      return fail(FLASHBOX_ERR_UNSUPPORTED_IMPL,
                  "num_splits = " + str(e.num_splits) + " with " +
                      (e.learnable_sink ? "learnable_sink" : e.seqused_q ? "seqused_q" : "seqused_k") +
                      " is not supported yet (split the keys yourself and combine)");
  }
  if (e.dsink && !e.learnable_sink)
    return fail(FLASHBOX_ERR_INVALID_ARGUMENT, "dsink is set but learnable_sink is NULL (pass NULL without sinks)");
  if (pass == Pass::backward && e.learnable_sink && !e.dsink)
    return fail(FLASHBOX_ERR_NULL_POINTER,
                "dsink is NULL: the backward of a call with learnable_sink writes its gradient (fp32 [heads_q])");
  if (bool(e.document_ids_q) != bool(e.document_ids_k))
    return fail(FLASHBOX_ERR_NULL_POINTER, std::string(e.document_ids_q ? "document_ids_k" : "document_ids_q") +
                                               " is NULL but " +
                                               (e.document_ids_q ? "document_ids_q" : "document_ids_k") +
                                               " is set (document masking needs the ids of queries and keys)");
  if (const std::string field = ext_cpu_only_field(e); a.device == FLASHBOX_CUDA && !field.empty())
    return fail(FLASHBOX_ERR_UNSUPPORTED_IMPL, field + ": the CUDA kernels do not take it yet; it runs on device = cpu");
  if (e.block_mask && ext_is_varlen(e))
    return fail(FLASHBOX_ERR_UNSUPPORTED_IMPL,
                "block_mask with cu_seqlens: block masks take fixed-length calls "
                "(pad the sequences, or use document_ids for packed ones)");
  if (e.qv && a.device == FLASHBOX_CUDA) {
    // The explicit forward (src/cuda/explicit) runs every CUDA call with qv: its head dims, and the
    // mask families it does not take.
    const int64_t dv = ext_head_dim_v(a, e);
    if (dv % 8 != 0 || dv > cuda_explicit_limits::kMaxHeadDimV)
      return fail(FLASHBOX_ERR_UNSUPPORTED_HEAD_DIM,
                  "qv with head_dim_v = " + str(dv) + " on device = cuda: the explicit forward takes multiples of 8 "
                  "up to " + str(cuda_explicit_limits::kMaxHeadDimV));
    const char *family = e.document_ids_q ? "document_ids_q/k"
                         : e.prefix_lengths ? "prefix_lengths"
                         : e.block_mask     ? "block_mask"
                         : e.mask_mod       ? "mask_mod"
                                            : nullptr;
    if (family)
      return fail(FLASHBOX_ERR_UNSUPPORTED_IMPL, std::string("qv with ") + family +
                                                     " on device = cuda is not supported (the explicit forward takes "
                                                     "windows, causal, attention_chunk, seqused, softcap, ALiBi, sinks "
                                                     "and varlen); it runs on device = cpu");
  }
  if (e.qv && a.device == FLASHBOX_CPU && a.head_dim + ext_head_dim_v(a, e) > kCpuMaxHeadDim)
    return fail(FLASHBOX_ERR_UNSUPPORTED_HEAD_DIM,
                "qv with head_dim = " + str(a.head_dim) + " and head_dim_v = " + str(ext_head_dim_v(a, e)) +
                    ": head_dim + head_dim_v must be at most " + str(kCpuMaxHeadDim) +
                    " on device = cpu (it runs q . k + qv . v as one product)");
  if (e.window_left < -1)
    return fail(FLASHBOX_ERR_INVALID_ARGUMENT,
                "window_left = " + str(e.window_left) + " must be >= -1 (-1: unbounded to the left)");
  if (e.window_right < -1)
    return fail(FLASHBOX_ERR_INVALID_ARGUMENT,
                "window_right = " + str(e.window_right) + " must be >= -1 (-1: unbounded to the right)");
  if (a.causal == 1 && e.window_right != -1 && e.window_right != 0)
    return fail(FLASHBOX_ERR_INVALID_ARGUMENT, "window_right = " + str(e.window_right) +
                                                   " contradicts causal = 1 (causal means window_right = 0; "
                                                   "pass -1 or 0)");
  if (!std::isfinite(e.softcap) || e.softcap < 0.0f)
    return fail(FLASHBOX_ERR_INVALID_ARGUMENT,
                "softcap = " + std::to_string(e.softcap) + " must be finite and >= 0 (0: off)");
  if (!e.alibi_slopes && e.alibi_batch_stride != 0)
    return fail(FLASHBOX_ERR_INVALID_ARGUMENT, "alibi_batch_stride = " + str(e.alibi_batch_stride) +
                                                   " is set but alibi_slopes is NULL (pass 0 without ALiBi)");
  if (e.alibi_slopes && e.alibi_batch_stride != 0 && e.alibi_batch_stride < a.heads_q)
    return fail(FLASHBOX_ERR_INVALID_ARGUMENT, "alibi_batch_stride = " + str(e.alibi_batch_stride) +
                                                   " must be 0 (one slope per head for every batch) or >= heads_q = " +
                                                   str(a.heads_q) + " (a row of slopes per batch)");
  if (e.alibi_slopes && a.batch > 0 && e.alibi_batch_stride > (int64_t(1) << 40) / a.batch)
    return fail(FLASHBOX_ERR_SIZE_OVERFLOW, "alibi_batch_stride = " + str(e.alibi_batch_stride) +
                                                " x batch = " + str(a.batch) + " is not a plausible slope buffer");
  if (bool(e.cu_seqlens_q) != bool(e.cu_seqlens_k))
    return fail(FLASHBOX_ERR_NULL_POINTER, std::string(e.cu_seqlens_q ? "cu_seqlens_k" : "cu_seqlens_q") +
                                               " is NULL but " + (e.cu_seqlens_q ? "cu_seqlens_q" : "cu_seqlens_k") +
                                               " is set (variable-length batches need both)");
  if (!ext_is_varlen(e)) {
    if (e.max_seqlen_q != 0 || e.max_seqlen_k != 0)
      return fail(FLASHBOX_ERR_INVALID_ARGUMENT, "max_seqlen_q = " + str(e.max_seqlen_q) +
                                                     ", max_seqlen_k = " + str(e.max_seqlen_k) +
                                                     " are only meaningful with cu_seqlens (pass 0 without them)");
  } else {
    if (e.max_seqlen_q < 0 || e.max_seqlen_k < 0)
      return fail(FLASHBOX_ERR_INVALID_SIZE, "max_seqlen_q = " + str(e.max_seqlen_q) +
                                                 ", max_seqlen_k = " + str(e.max_seqlen_k) + " must be >= 0");
    if (a.batch > (int64_t(1) << 31) - 2)
      return fail(FLASHBOX_ERR_INVALID_SIZE, "batch = " + str(a.batch) + " sequences do not fit int32 cu_seqlens");
    if (a.seqlen_q > INT32_MAX || a.seqlen_k > INT32_MAX)
      return fail(FLASHBOX_ERR_INVALID_SIZE, "seqlen_q = " + str(a.seqlen_q) + ", seqlen_k = " + str(a.seqlen_k) +
                                                 " total tokens do not fit int32 cu_seqlens");
  }
  // Last: the mods (src/api/mod_api.hpp): a mask mod runs on cuda, a score mod nowhere yet.
  return check_ext_mods(a, e);
}

flashbox_attention_args plain_view(const flashbox_attention_args &a, const flashbox_attention_ext &e) {
  flashbox_attention_args v = a;
  if (ext_is_varlen(e)) v.batch = 1;
  return v;
}

int validate_ext_memory(const flashbox_attention_args &a, const flashbox_attention_ext &e, const ByteView *outputs,
                        const char *const *output_names, int n_outputs) {
  if (int rc = validate_fp8_memory(a, e, outputs, output_names, n_outputs)) return rc;
  if (e.alibi_slopes) {
    const int64_t count = (e.alibi_batch_stride ? (a.batch - 1) * e.alibi_batch_stride : 0) + a.heads_q;
    if (int rc = check_input_buffer(e.alibi_slopes, count * 4, "alibi_slopes", outputs, output_names, n_outputs))
      return rc;
    if (a.device == FLASHBOX_CPU)
      for (int64_t b = 0; b < (e.alibi_batch_stride ? a.batch : 1); ++b)
        for (int64_t h = 0; h < a.heads_q; ++h) {
          const float s = e.alibi_slopes[b * e.alibi_batch_stride + h];
          if (!std::isfinite(s))
            return fail(FLASHBOX_ERR_INVALID_ARGUMENT, "alibi_slopes[" + str(b * e.alibi_batch_stride + h) +
                                                           "] = " + std::to_string(s) + " (batch " + str(b) +
                                                           ", head " + str(h) + ") must be finite");
        }
  }
  if (ext_is_varlen(e)) {
    if (int rc =
            check_input_buffer(e.cu_seqlens_q, (a.batch + 1) * 4, "cu_seqlens_q", outputs, output_names, n_outputs))
      return rc;
    if (int rc =
            check_input_buffer(e.cu_seqlens_k, (a.batch + 1) * 4, "cu_seqlens_k", outputs, output_names, n_outputs))
      return rc;
    if (a.device == FLASHBOX_CPU) {
      if (int rc = check_cu_seqlens(e.cu_seqlens_q, a.batch, a.seqlen_q, e.max_seqlen_q, "q")) return rc;
      if (int rc = check_cu_seqlens(e.cu_seqlens_k, a.batch, a.seqlen_k, e.max_seqlen_k, "k")) return rc;
    }
  }
  if (e.qv) {  // a tensor like q with rows of head_dim_v (varlen: packed, as q)
    const flashbox_attention_args flat = plain_view(a, e);
    TensorDesc t{"qv", "qv_stride", e.qv, e.qv_stride, flat.batch, flat.seqlen_q, flat.heads_q, ext_head_dim_v(a, e)};
    t.head_dim_name = "head_dim_v";
    if (int rc = validate_tensor(t, a.dtype, a.device)) return rc;
    if (int rc = check_outputs_disjoint(tensor_view(t, a.dtype), e.qv, "qv", outputs, output_names, n_outputs))
      return rc;
  }
  if (e.learnable_sink) {
    if (int rc = check_input_buffer(e.learnable_sink, a.heads_q * 4, "learnable_sink", outputs, output_names,
                                    n_outputs))
      return rc;
    // On cuda the values are in device memory and not read here (as the slopes' are not).
    if (int rc = validate_device_pointer(e.learnable_sink, "learnable_sink", a.device)) return rc;
    if (a.device == FLASHBOX_CPU)
      for (int64_t h = 0; h < a.heads_q; ++h)
        if (!std::isfinite(e.learnable_sink[h]))
          return fail(FLASHBOX_ERR_INVALID_ARGUMENT, "learnable_sink[" + str(h) + "] = " +
                                                         std::to_string(e.learnable_sink[h]) + " must be finite");
  }
  if (e.dsink) {  // an output of the backward: disjoint from the sinks and from every other output
    if (int rc = check_input_buffer(e.dsink, a.heads_q * 4, "dsink", outputs, output_names, n_outputs)) return rc;
    if (int rc = validate_device_pointer(e.dsink, "dsink", a.device)) return rc;
    ByteView sink_view, dsink_view;
    sink_view.base = reinterpret_cast<uintptr_t>(e.learnable_sink), sink_view.run = a.heads_q * 4;
    dsink_view.base = reinterpret_cast<uintptr_t>(e.dsink), dsink_view.run = a.heads_q * 4;
    if (views_overlap(dsink_view, sink_view).overlap)
      return fail(FLASHBOX_ERR_INVALID_ARGUMENT, "dsink = " + ptr_str(e.dsink) + " overlaps learnable_sink = " +
                                                     ptr_str(e.learnable_sink) + " in memory");
  }
  if (e.document_ids_q) {  // [batch, seqlen] or, packed, [total]: seqlen_q / seqlen_k rows per batch entry
    const int64_t per = ext_is_varlen(e) ? 1 : a.batch;
    if (int rc = check_input_buffer(e.document_ids_q, per * a.seqlen_q * 4, "document_ids_q", outputs, output_names,
                                    n_outputs))
      return rc;
    if (int rc = check_input_buffer(e.document_ids_k, per * a.seqlen_k * 4, "document_ids_k", outputs, output_names,
                                    n_outputs))
      return rc;
  }
  if (e.prefix_lengths) {
    if (int rc = check_input_buffer(e.prefix_lengths, a.batch * 4, "prefix_lengths", outputs, output_names, n_outputs))
      return rc;
    for (int64_t b = 0; a.device == FLASHBOX_CPU && b < a.batch; ++b) {
      const int64_t keys = ext_is_varlen(e) ? e.cu_seqlens_k[b + 1] - e.cu_seqlens_k[b] : a.seqlen_k;
      if (e.prefix_lengths[b] < 0 || e.prefix_lengths[b] > keys)
        return fail(FLASHBOX_ERR_INVALID_ARGUMENT,
                    "prefix_lengths[" + str(b) + "] = " + str(e.prefix_lengths[b]) + " is outside [0, " + str(keys) +
                        "] (" + (ext_is_varlen(e) ? "the key count of sequence " + str(b) : std::string("seqlen_k")) +
                        ")");
    }
  }
  for (const char which : {'q', 'k'}) {
    const int32_t *used = which == 'q' ? e.seqused_q : e.seqused_k;
    if (!used) continue;
    const std::string name = std::string("seqused_") + which;
    if (int rc = check_input_buffer(used, a.batch * 4, name.c_str(), outputs, output_names, n_outputs)) return rc;
    if (a.device != FLASHBOX_CPU) continue;
    // Checked after cu_seqlens, so the spans are known to be valid lengths.
    const int32_t *cu = which == 'q' ? e.cu_seqlens_q : e.cu_seqlens_k;
    for (int64_t b = 0; b < a.batch; ++b) {
      const int64_t length = ext_is_varlen(e) ? cu[b + 1] - cu[b] : which == 'q' ? a.seqlen_q : a.seqlen_k;
      if (used[b] < 0 || used[b] > length)
        return fail(FLASHBOX_ERR_INVALID_ARGUMENT,
                    name + "[" + str(b) + "] = " + str(used[b]) + " is outside [0, " + str(length) + "] (the " +
                        (ext_is_varlen(e) ? std::string("length of sequence ") + str(b) + " in cu_seqlens_" + which
                                          : std::string("seqlen_") + which) +
                        ")");
    }
  }
  return FLASHBOX_OK;
}

core::ScoreMods ext_mods(const flashbox_attention_args &a, const flashbox_attention_ext &e) {
  core::ScoreMods m;
  m.window_left = e.window_left;
  m.window_right = a.causal ? 0 : e.window_right;
  m.softcap = e.softcap;
  m.alibi_slopes = e.alibi_slopes;
  m.alibi_batch_stride = e.alibi_batch_stride;
  m.chunk = e.attention_chunk;
  m.sinks = e.learnable_sink;
  m.doc_q = e.document_ids_q, m.doc_k = e.document_ids_k;
  if (!ext_is_varlen(e)) m.doc_q_stride = a.seqlen_q, m.doc_k_stride = a.seqlen_k;  // packed: offset per sequence
  m.prefix = e.prefix_lengths;
  return m;
}

}  // namespace flashbox::detail
