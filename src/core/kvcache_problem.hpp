// A validated KV-cache attention call (flashbox_attention_kvcache) as the backends receive it: the
// caller's arguments plus what src/api/kvcache_api.cpp derived from them. Backends (src/cpu,
// src/cuda/decode) assume every rule of kvcache_api.cpp holds and never re-check.
#pragma once
#include <cstdint>
#include <vector>

#include "flashbox/flashbox.h"

namespace flashbox::detail {

struct KvcacheProblem {
  const flashbox_kvcache_args *args = nullptr;
  bool paged = false;          // block_table given
  int64_t capacity = 0;        // keys one batch entry's cache can hold (max_seqlen, or pages x page_size)
  int64_t max_total_keys = 0;  // max over b of cache_seqlens[b] + seqlen_new (capacity when not read)
  bool lengths_known = false;  // max_total_keys was read from the tables (not the capacity bound)
  float scale = 0.f;           // softmax scale (0 resolved: 1/sqrt(head_dim), with qv 1/sqrt(head_dim + head_dim_v))
  int64_t head_dim_v = 0;      // V's and O's head dim (head_dim_v, or head_dim when it is 0)
  // qv, head_dim_v != head_dim or attention_chunk: on cuda the explicit forward runs the call
  // (src/cuda/explicit), never the decode kernels or the prefill path.
  bool explicit_forward = false;
  // When lengths_known: the tables as read on the host (cache_leftpad / cache_batch_idx empty when NULL).
  std::vector<int32_t> seqlens, leftpad, batch_idx;
};

}  // namespace flashbox::detail
