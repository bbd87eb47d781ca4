// Launch parameters of the decode kernel family (src/cuda/decode): filled once per call by
// decode_api.cpp from a validated KvcacheProblem, read by the append, split and combine kernels.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace flashbox::cuda {

struct DecodeParams {
  const void *q;
  int64_t q_stride[3];  // batch, seq, head (elements)
  void *k_cache, *v_cache;
  int64_t k_stride[3], v_stride[3];  // entry (batch or page), row, head
  const void *k_new, *v_new;
  int64_t k_new_stride[3], v_new_stride[3];
  void *o;
  int64_t o_stride[3];
  float *lse;          // [batch, heads_q, seqlen_q] or null
  float *o_partial;    // split workspace [num_splits][batch * heads_q * seqlen_q][head_dim]
  float *lse_partial;  // [num_splits][batch * heads_q * seqlen_q]
  const int32_t *cache_seqlens, *block_table, *cache_batch_idx, *cache_leftpad;
  const float *alibi_slopes;
  int64_t block_table_stride;
  int64_t alibi_batch_stride;  // 0: one [heads_q] row of slopes for every entry
  const float *learnable_sink;  // fp32 [heads_q] or null: folded in where the final O and LSE are written
  // fp8 e4m3 cache only (the fp8 instantiations and the fp8 append read them): fp32 [batch, heads_kv]
  // with strides (batch, kv head), or null for 1.
  const float *k_descale, *v_descale;
  int64_t k_descale_stride[2], v_descale_stride[2];
  int64_t cache_rows;  // max_seqlen (contiguous) or page_size (paged)
  int64_t cache_entries;
  int64_t capacity;  // keys one batch entry can hold
  int batch, seqlen_q, heads_q, heads_kv, group, seqlen_new;
  int head_dim;   // the call's: a multiple of 8, at most the instantiation's D (columns past it are zeros)
  int rows;       // seqlen_q * group: the query rows that share one KV head
  int row_tiles;  // ceil(rows / 16)
  int num_splits;
  float scale;    // softmax scale (natural units)
  float softcap;  // 0: none
  int causal, has_window;
  int64_t window_left, window_right;
};

// Rotary embedding tables (decode_rotary.cu): [rows >= capacity, rotary_dim / 2], the dtype of q.
struct RotaryParams {
  const void *cos, *sin;
  int rotary_dim;
  int interleaved;
};

cudaError_t launch_decode_append_rotary(const DecodeParams &p, const RotaryParams &r, int head_dim, bool bf16,
                                        cudaStream_t stream);
// q turned to its positions into q_out [batch, seqlen_q, heads_q, head_dim] (contiguous).
cudaError_t launch_decode_rotate_q(const DecodeParams &p, const RotaryParams &r, void *q_out, int head_dim, bool bf16,
                                   cudaStream_t stream);

// The instantiation (64, 128, 256) that serves a head_dim: the next one up.
int decode_kernel_dim(int head_dim);

// Per-instantiation launchers (decode_dispatch.cu). `kernel_name` receives a static string.
// fp8: the cache is e4m3 (the fp8 instantiations of the split kernel; the combine is the same).
cudaError_t launch_decode_split(const DecodeParams &p, int head_dim, bool bf16, bool fp8, cudaStream_t stream,
                                const char **kernel_name);
cudaError_t launch_decode_combine(const DecodeParams &p, int head_dim, bool bf16, cudaStream_t stream);
cudaError_t launch_decode_append(const DecodeParams &p, int head_dim, int element_size, cudaStream_t stream);
// k_new/v_new (bf16 or fp16) quantized into an e4m3 cache with the descales (decode_append_fp8.cu).
cudaError_t launch_decode_append_fp8(const DecodeParams &p, int head_dim, bool bf16, cudaStream_t stream);
// Resident CTAs of the split kernel per SM (occupancy), and the bytes one CTA keeps in flight.
cudaError_t decode_split_occupancy(int head_dim, bool bf16, bool fp8, int *ctas_per_sm, int64_t *bytes_in_flight);

}  // namespace flashbox::cuda
