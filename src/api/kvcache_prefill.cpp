// See kvcache_prefill.hpp.
#include "api/kvcache_prefill.hpp"

#include <string>
#include <vector>

#include "api/ext_validate.hpp"
#include "api/validate.hpp"
#include "core/call_state.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/kvcache_backends.hpp"
#include "flashbox/flashbox.h"

namespace flashbox::detail {
namespace {

int64_t entry_of(const KvcacheProblem &p, int64_t b) { return p.batch_idx.empty() ? b : p.batch_idx[size_t(b)]; }
int64_t first_key(const KvcacheProblem &p, int64_t b) { return p.leftpad.empty() ? 0 : p.leftpad[size_t(b)]; }
int64_t end_key(const KvcacheProblem &p, int64_t b) { return int64_t(p.seqlens[size_t(b)]) + p.args->seqlen_new; }

const void *advance(const void *base, int64_t elements, flashbox_dtype dtype) {
  return static_cast<const char *>(base) + elements * dtype_size(dtype);
}

}  // namespace

bool takes_prefill_path(const KvcacheProblem &p, int64_t min_rows) {
  const flashbox_kvcache_args &a = *p.args;
  if (!p.lengths_known || p.paged || a.rotary_cos) return false;
  if (p.explicit_forward) return false;  // qv, head_dim_v, attention_chunk: the backends take them
  if (a.cache_dtype == FLASHBOX_FLOAT8_E4M3) return false;  // the decode path serves every fp8 cache
  if (a.seqlen_q * (a.heads_q / a.heads_kv) < min_rows) return false;
  if (a.device == FLASHBOX_CUDA && (a.head_dim % 8 != 0 || a.head_dim > 256)) return false;
  for (int64_t b = 0; b < a.batch; ++b)
    if (end_key(p, b) - first_key(p, b) < 1) return false;
  return true;
}

int kvcache_as_prefill(const KvcacheProblem &p) {
  const flashbox_kvcache_args &a = *p.args;
  // The call's mask in the extension's terms (core/masks.hpp): causal caps the right side at the
  // diagonal, so with causal the window's right bound is left to it.
  flashbox_attention_ext ext = flashbox_attention_ext_default();
  if (a.has_window) {
    ext.window_left = int32_t(a.window_left < 0 ? -1 : a.window_left);
    ext.window_right = int32_t(a.causal || a.window_right < 0 ? -1 : a.window_right);
  }
  ext.softcap = a.softcap;
  ext.learnable_sink = a.learnable_sink;  // [heads_q], the same for every batch entry
  std::vector<flashbox_attention_args> calls(size_t(a.batch));
  for (int64_t b = 0; b < a.batch; ++b) {
    const int64_t entry = entry_of(p, b), k0 = first_key(p, b);
    flashbox_attention_args &f = calls[size_t(b)];
    f.device = a.device, f.dtype = a.dtype, f.impl = FLASHBOX_AUTO;
    f.batch = 1, f.seqlen_q = a.seqlen_q, f.seqlen_k = end_key(p, b) - k0;
    f.heads_q = a.heads_q, f.heads_kv = a.heads_kv, f.head_dim = a.head_dim;
    f.q = advance(a.q, b * a.q_stride[0], a.dtype);
    f.k = advance(a.k_cache, entry * a.k_cache_stride[0] + k0 * a.k_cache_stride[1], a.dtype);
    f.v = advance(a.v_cache, entry * a.v_cache_stride[0] + k0 * a.v_cache_stride[1], a.dtype);
    f.o = static_cast<char *>(a.o) + b * a.o_stride[0] * dtype_size(a.dtype);
    f.lse = a.lse ? a.lse + b * a.heads_q * a.seqlen_q : nullptr;
    for (int i = 0; i < 3; ++i) {
      f.q_stride[i] = a.q_stride[i], f.o_stride[i] = a.o_stride[i];
      f.k_stride[i] = a.k_cache_stride[i], f.v_stride[i] = a.v_cache_stride[i];
    }
    f.softmax_scale = p.scale;
    f.causal = a.causal;
    f.stream = a.stream;
    // Every forward's own rules before the cache is written (nothing is written on failure).
    if (int rc = validate_forward_args(&f)) return rc;
    if (int rc = validate_ext_fields(f, ext, Pass::forward)) return rc;
  }
#ifdef FLASHBOX_HAVE_CUDA
  if (int rc = a.device == FLASHBOX_CUDA ? cuda_kvcache_append(p) : cpu_kvcache_append(p)) return rc;
#else
  if (int rc = cpu_kvcache_append(p)) return rc;
#endif
  for (int64_t b = 0; b < a.batch; ++b) {
    ext.alibi_slopes = a.alibi_slopes ? a.alibi_slopes + b * a.alibi_batch_stride : nullptr;
    if (int rc = flashbox_attention_forward_ext(&calls[size_t(b)], &ext); rc != FLASHBOX_OK)
      return fail(rc, "flashbox_attention_kvcache (chunked prefill through the forward, batch entry " +
                          std::to_string(b) + "): " + last_error());
  }
  set_kernel_name(std::string(kernel_name()) + " (kvcache prefill)");
  return FLASHBOX_OK;
}

}  // namespace flashbox::detail
