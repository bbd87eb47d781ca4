// Where one appended row goes: the two append kernels (decode_append.cu, plain copy; decode_rotary.cu,
// keys turned on the way) share the decoding of a flat row index into (batch entry, new token, KV
// head) and the lookup of its cache slot through cache_batch_idx or the block table.
#pragma once
#include <cstdint>

#include "core/kvcache_rules.hpp"
#include "cuda/decode/decode_params.hpp"

namespace flashbox::cuda {

struct AppendSlot {
  int64_t cache_row;           // j = cache_seqlens[b] + i: the key's position in its sequence
  int64_t k_cache, v_cache;    // element offsets of the row in k_cache / v_cache
  int64_t k_new, v_new;        // element offsets of the row in k_new / v_new
};

// Row `row` of the [batch, seqlen_new, heads_kv] new rows. False when its slot is out of range
// (possible only with tables_trusted): the row is skipped, never written.
__device__ __forceinline__ bool append_slot(const DecodeParams &p, int64_t row, AppendSlot &s) {
  const int h = int(row % p.heads_kv);
  row /= p.heads_kv;
  const int i = int(row % p.seqlen_new);
  const int b = int(row / p.seqlen_new);
  const int64_t j = int64_t(p.cache_seqlens[b]) + i;
  if (j < 0 || j >= p.capacity) return false;
  const kvcache::CacheSlot slot =
      kvcache::cache_slot(p.block_table, p.block_table_stride, p.cache_rows, p.cache_entries, p.cache_batch_idx, b, j);
  s.k_cache = kvcache::cache_offset(slot, h, p.k_stride[0], p.k_stride[1], p.k_stride[2]);
  s.v_cache = kvcache::cache_offset(slot, h, p.v_stride[0], p.v_stride[1], p.v_stride[2]);
  if (s.k_cache < 0) return false;
  s.cache_row = j;
  s.k_new = b * p.k_new_stride[0] + i * p.k_new_stride[1] + h * p.k_new_stride[2];
  s.v_new = b * p.v_new_stride[0] + i * p.v_new_stride[1] + h * p.v_new_stride[2];
  return true;
}

}  // namespace flashbox::cuda
