// Launch parameters of the Hopper MLA decode kernel (mla_decode_sm90_kernel.cuh), filled once per call
// by mla_decode_api.cu from a validated KvcacheProblem that mla_tile_policy.hpp's route accepted.
// Host and device code; no CUDA header needed.
#pragma once
#include <cstdint>

namespace flashbox::sm90::mla {

// The score row is 576 columns wide (nine 64-column panels) and V is 512 of them. The first
// `a_panels` panels of a Q row come from q and of a K row from k_cache; the rest from qv and v_cache:
//   qv form (FlashAttention-3): q and k_cache 64 wide, qv and v_cache 512 wide: a_panels 1, V = panels 1..8
//   576 form (FlashMLA):        q and k_cache 576 wide, v_cache = k_cache:       a_panels 9, V = panels 0..7
struct MlaParams {
  const void *q, *qv;                 // qv null in the 576 form
  int64_t q_stride[3], qv_stride[3];  // batch, token, head (elements)
  const void *k_cache, *v_cache;
  int64_t k_stride[2], v_stride[2];  // entry (batch or page), row (elements); one KV head
  void *o;
  int64_t o_stride[3];
  float *lse;          // [batch, heads_q, seqlen_q] or null
  float *o_partial;    // num_splits > 1: [num_splits][batch * heads_q * seqlen_q][512] fp32
  float *lse_partial;  // [num_splits][batch * heads_q * seqlen_q]
  const int32_t *cache_seqlens, *block_table, *cache_batch_idx;
  int64_t block_table_stride;
  int64_t page_size;  // cache_rows: a page's rows (paged) or an entry's (contiguous)
  int64_t cache_entries, capacity;
  int batch, seqlen_q, heads_q;
  int rows;       // seqlen_q * heads_q: the query rows of one batch entry (row r: token r / heads_q)
  int row_tiles;  // ceil(rows / 64)
  int num_splits;
  int a_panels, v_panel;
  int causal;
  float scale, scale_log2;  // softmax scale (natural units) and times log2 e
};

}  // namespace flashbox::sm90::mla
