// The explicit forward's host side (explicit_forward.cu has the kernel and its design): a validated
// Problem (the extension's forward with qv) or KvcacheProblem (the KV-cache call with qv,
// head_dim_v != head_dim or attention_chunk) into ExplicitParams, and the launches on the caller's
// stream. src/api chooses this family (ext_api.cpp, kvcache_api.cpp); the kernels assume what
// validation guarantees and re-check nothing.
#include <cuda_runtime.h>

#include <string>

#include "core/backends.hpp"
#include "core/call_state.hpp"
#include "core/error.hpp"
#include "core/kvcache_backends.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/explicit/explicit_params.hpp"

namespace flashbox::detail {
namespace {

using cuda::explicit_fwd::AppendParams;
using cuda::explicit_fwd::ExplicitParams;
using cuda::explicit_fwd::KeyLayout;

void copy3(int64_t *dst, const int64_t *src) {
  for (int i = 0; i < 3; ++i) dst[i] = src[i];
}

std::string kernel_label(bool bf16) { return std::string("cuda_explicit_") + (bf16 ? "bf16" : "fp16"); }

}  // namespace

int cuda_explicit_forward(const Problem &p, const void *qv, const int64_t *qv_stride) {
  ExplicitParams x{};
  x.q = p.q, x.qv = qv, x.k = p.k, x.v = p.v, x.o = p.o, x.lse = p.lse;
  copy3(x.q_stride, p.q_stride), copy3(x.k_stride, p.k_stride), copy3(x.v_stride, p.v_stride);
  copy3(x.o_stride, p.o_stride);
  if (qv) copy3(x.qv_stride, qv_stride);
  x.layout = p.varlen() ? KeyLayout::varlen : KeyLayout::dense;
  x.batch = int(p.batch), x.heads_q = int(p.heads_q), x.heads_kv = int(p.heads_kv), x.group = int(p.group);
  x.head_dim = int(p.head_dim), x.head_dim_v = int(p.head_dim_v);
  x.seqlen_q = int(p.seqlen_q), x.seqlen_k = int(p.seqlen_k);
  x.cu_seqlens_q = p.cu_seqlens_q, x.cu_seqlens_k = p.cu_seqlens_k;
  x.max_seqlen_q = int(p.max_seqlen_q), x.max_seqlen_k = int(p.max_seqlen_k);
  x.seqused_q = p.seqused_q, x.seqused_k = p.seqused_k;
  x.lse_packed = p.varlen();
  x.scale = p.scale;
  x.window_left = int(p.mods.window_left < 0 ? -1 : p.mods.window_left);
  x.window_right = int(p.mods.window_right < 0 ? -1 : p.mods.window_right);
  x.chunk = int(p.mods.chunk);
  x.softcap = p.mods.softcap;
  x.alibi_slopes = p.mods.alibi_slopes, x.alibi_batch_stride = p.mods.alibi_batch_stride;
  x.sinks = p.mods.sinks;
  const bool bf16 = p.dtype == FLASHBOX_BFLOAT16;
  FLASHBOX_CUDA_TRY(cuda::explicit_fwd::launch_explicit_forward(x, bf16, static_cast<cudaStream_t>(p.stream)));
  set_kernel_name(kernel_label(bf16) + (qv ? "_qv" : ""));
  return FLASHBOX_OK;
}

int cuda_kvcache_explicit(const KvcacheProblem &pr) {
  const flashbox_kvcache_args &a = *pr.args;
  const auto stream = static_cast<cudaStream_t>(a.stream);
  const bool bf16 = a.dtype == FLASHBOX_BFLOAT16;
  const int64_t dv = a.head_dim_v != 0 ? a.head_dim_v : a.head_dim;
  if (a.k_new) {  // the new keys and values first, so the attention sees them
    AppendParams ap{};
    ap.k_new = a.k_new, ap.v_new = a.v_new;
    copy3(ap.k_new_stride, a.k_new_stride), copy3(ap.v_new_stride, a.v_new_stride);
    ap.k_cache = a.k_cache, ap.v_cache = a.v_cache;
    copy3(ap.k_cache_stride, a.k_cache_stride), copy3(ap.v_cache_stride, a.v_cache_stride);
    ap.cache_seqlens = a.cache_seqlens, ap.cache_batch_idx = a.cache_batch_idx, ap.block_table = a.block_table;
    ap.block_table_stride = a.block_table_stride, ap.cache_rows = a.cache_rows, ap.cache_entries = a.cache_entries;
    ap.capacity = pr.capacity;
    ap.batch = int(a.batch), ap.seqlen_new = int(a.seqlen_new), ap.heads_kv = int(a.heads_kv);
    ap.head_dim = int(a.head_dim), ap.head_dim_v = int(dv);
    ap.rotary_cos = a.rotary_cos, ap.rotary_sin = a.rotary_sin;
    ap.rotary_dim = int(a.rotary_dim), ap.rotary_interleaved = a.rotary_interleaved;
    FLASHBOX_CUDA_TRY(cuda::explicit_fwd::launch_explicit_append(ap, bf16, stream));
  }
  ExplicitParams x{};
  x.q = a.q, x.qv = a.qv, x.k = a.k_cache, x.v = a.v_cache, x.o = a.o, x.lse = a.lse;
  copy3(x.q_stride, a.q_stride), copy3(x.k_stride, a.k_cache_stride), copy3(x.v_stride, a.v_cache_stride);
  copy3(x.o_stride, a.o_stride);
  if (a.qv) copy3(x.qv_stride, a.qv_stride);
  x.layout = KeyLayout::cache;
  x.batch = int(a.batch), x.heads_q = int(a.heads_q), x.heads_kv = int(a.heads_kv);
  x.group = int(a.heads_q / a.heads_kv);
  x.head_dim = int(a.head_dim), x.head_dim_v = int(dv);
  x.seqlen_q = int(a.seqlen_q), x.seqlen_k = 0;
  x.cache_seqlens = a.cache_seqlens, x.cache_leftpad = a.cache_leftpad;
  x.cache_batch_idx = a.cache_batch_idx, x.block_table = a.block_table;
  x.block_table_stride = a.block_table_stride, x.cache_rows = a.cache_rows, x.cache_entries = a.cache_entries;
  x.capacity = pr.capacity;
  x.seqlen_new = int(a.seqlen_new);
  x.rotary_cos = a.rotary_cos, x.rotary_sin = a.rotary_sin;
  x.rotary_dim = int(a.rotary_dim), x.rotary_interleaved = a.rotary_interleaved;
  x.rotary_per_token = a.causal || a.has_window;
  x.scale = pr.scale;
  // The KV-cache mask in the extension's terms: causal caps the right side at the diagonal.
  x.window_left = a.has_window && a.window_left >= 0 ? int(a.window_left) : -1;
  x.window_right = a.causal ? 0 : (a.has_window && a.window_right >= 0 ? int(a.window_right) : -1);
  x.chunk = int(a.attention_chunk);
  x.softcap = a.softcap;
  x.alibi_slopes = a.alibi_slopes, x.alibi_batch_stride = a.alibi_batch_stride;
  x.sinks = a.learnable_sink;
  FLASHBOX_CUDA_TRY(cuda::explicit_fwd::launch_explicit_forward(x, bf16, stream));
  set_kernel_name(kernel_label(bf16) + "_kvcache" + (a.qv ? "_qv" : ""));
  return FLASHBOX_OK;
}

}  // namespace flashbox::detail
