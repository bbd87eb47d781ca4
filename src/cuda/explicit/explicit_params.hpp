// Launch parameters of the explicit forward (explicit_forward.cu): one struct for its three key
// layouts, filled by explicit_api.cpp from a validated Problem (the extension's forward with qv) or
// KvcacheProblem (the KV-cache call with qv, head_dim_v != head_dim or attention_chunk).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "core/explicit_limits.hpp"

namespace flashbox::cuda::explicit_fwd {

// The largest head dims the kernel takes (core/explicit_limits.hpp), multiples of 8.
constexpr int kMaxHeadDim = detail::cuda_explicit_limits::kMaxHeadDim;
constexpr int kMaxHeadDimV = detail::cuda_explicit_limits::kMaxHeadDimV;

// Where key j of sequence b lives.
enum class KeyLayout : int {
  dense = 0,   // k[b, j, g, :] with k_stride (batch, token, head)
  varlen = 1,  // k[k0 + j, g, :], k0 from cu_seqlens_k (device memory)
  cache = 2,   // a KV cache: cache_batch_idx / block_table slot (core/kvcache_rules.hpp)
};

struct ExplicitParams {
  const void *q, *qv;  // qv null: scores are q . k alone
  const void *k, *v;
  void *o;
  float *lse;  // null: not written
  int64_t q_stride[3], qv_stride[3], k_stride[3], v_stride[3], o_stride[3];
  KeyLayout layout;
  int batch, heads_q, heads_kv, group, head_dim, head_dim_v;
  int seqlen_q, seqlen_k;  // dense: the lengths; varlen: the totals of the packed tensors
  // varlen: int32 [batch + 1] prefix sums in device memory (clamped as varlen_span.cuh says).
  const int32_t *cu_seqlens_q, *cu_seqlens_k;
  int max_seqlen_q, max_seqlen_k;
  // seqused (dense and varlen): int32 [batch] or null, clamped to the sequence's length.
  const int32_t *seqused_q, *seqused_k;
  // lse layout: false [batch, heads_q, seqlen_q]; true [heads_q, total_q] (varlen).
  bool lse_packed;
  // cache: key positions 0 .. cache_seqlens[b] + seqlen_new - 1, the first cache_leftpad[b] hidden.
  const int32_t *cache_seqlens, *cache_leftpad, *cache_batch_idx, *block_table;
  int64_t block_table_stride, cache_rows, cache_entries, capacity;
  int seqlen_new;
  // Rotary embedding of q as it is loaded (cache only; null: none): [rows, rotary_dim / 2] in the
  // dtype of q; query i at kvcache::rotary_query_position.
  const void *rotary_cos, *rotary_sin;
  int rotary_dim, rotary_interleaved, rotary_per_token;
  // Score and mask: window (-1 unbounded; causal is window_right = 0), attention_chunk (0 off),
  // softcap (0 off), ALiBi slopes (null off), sink logits [heads_q] (null off).
  float scale;
  int window_left, window_right, chunk;
  float softcap;
  const float *alibi_slopes;
  int64_t alibi_batch_stride;
  const float *sinks;
};

// One launch of the explicit forward on `stream` (bf16: __nv_bfloat16, else __half).
cudaError_t launch_explicit_forward(const ExplicitParams &p, bool bf16, cudaStream_t stream);

// k_new / v_new [batch, seqlen_new, heads_kv, head_dim / head_dim_v] into the cache at rows
// cache_seqlens[b] + i (k turned by the rotary tables when given, as decode_rotary.cu turns it).
struct AppendParams {
  const void *k_new, *v_new;
  int64_t k_new_stride[3], v_new_stride[3];
  void *k_cache, *v_cache;
  int64_t k_cache_stride[3], v_cache_stride[3];
  const int32_t *cache_seqlens, *cache_batch_idx, *block_table;
  int64_t block_table_stride, cache_rows, cache_entries, capacity;
  int batch, seqlen_new, heads_kv, head_dim, head_dim_v;
  const void *rotary_cos, *rotary_sin;
  int rotary_dim, rotary_interleaved;
};
cudaError_t launch_explicit_append(const AppendParams &p, bool bf16, cudaStream_t stream);

}  // namespace flashbox::cuda::explicit_fwd
