// The semantics of one KV-cache attention call, written once for host and device code: where key j of
// batch entry b lives in the cache, which keys a query row sees, and how a raw score becomes the
// softmax argument. The CPU implementation and the CUDA decode kernel both use these; the fp64
// reference (src/cpu/kvcache_reference_fp64.cpp) states the same rules again in its own words, so a
// mistake here is caught by the tests rather than shared.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define FLASHBOX_HD __host__ __device__ __forceinline__
#else
#define FLASHBOX_HD inline
#endif

namespace flashbox::kvcache {

// Visible keys of one query row, [lo, hi) (empty when hi <= lo). `total` = cache_seqlens[b] +
// seqlen_new, `start` = cache_leftpad[b] (or 0), query i of seqlen_q sits at position total - seqlen_q + i.
struct KeyRange {
  int64_t lo, hi;
};

FLASHBOX_HD KeyRange visible_keys(int64_t total, int64_t start, int64_t seqlen_q, int64_t i, bool causal,
                                  bool has_window, int64_t window_left, int64_t window_right) {
  const int64_t qpos = total - seqlen_q + i;
  int64_t lo = start, hi = total;
  if (causal && qpos + 1 < hi) hi = qpos + 1;
  if (has_window) {
    if (window_right >= 0 && qpos + window_right + 1 < hi) hi = qpos + window_right + 1;
    if (window_left >= 0 && qpos - window_left > lo) lo = qpos - window_left;
  }
  return {lo, hi};
}

// Where key `j` of batch entry `b` lives: cache entry (batch index or page) and row in it, or
// entry = -1 when the table value it needs is out of range (possible only with tables_trusted; such a
// key reads as zero and an append to it is dropped). Callers keep j < capacity.
struct CacheSlot {
  int64_t entry, row;
};

FLASHBOX_HD CacheSlot cache_slot(const int32_t *block_table, int64_t table_stride, int64_t page_size, int64_t entries,
                                 const int32_t *batch_idx, int64_t b, int64_t j) {
  int64_t entry, row;
  if (block_table) {
    entry = block_table[b * table_stride + j / page_size];
    row = j % page_size;
  } else {
    entry = batch_idx ? batch_idx[b] : b;
    row = j;
  }
  if (entry < 0 || entry >= entries || row < 0 || row >= page_size || j < 0) return {-1, 0};
  return {entry, row};
}

// Element offset of (slot, head h) in a cache with strides s0 (entry), s1 (row), s2 (head); -1 for an
// invalid slot.
FLASHBOX_HD int64_t cache_offset(CacheSlot slot, int64_t h, int64_t s0, int64_t s1, int64_t s2) {
  return slot.entry < 0 ? -1 : slot.entry * s0 + slot.row * s1 + h * s2;
}

}  // namespace flashbox::kvcache

namespace flashbox::kvcache {

// Rotary embedding (FlashAttention's rotary_cos/rotary_sin, [rows >= capacity, rotary_dim / 2]): pair m
// of a head row is (2m, 2m + 1) when interleaved, else (m, m + rotary_dim / 2) (GPT-NeoX); the pair is
// turned by the angle of position `pos`: y0 = x0 cos - x1 sin, y1 = x0 sin + x1 cos, in fp32 without
// fused multiply-adds (so that every implementation rounds alike). Positions are the cache rows
// themselves, as in FlashAttention-2 (its kernels and its tests), whatever cache_leftpad says: new
// key i of entry b at cache_seqlens[b] + i; query i at the same position when causal or windowed,
// else every query at cache_seqlens[b]. (cache_leftpad only hides the keys before it.)
FLASHBOX_HD void rotary_pair(int64_t m, int64_t rotary_dim, bool interleaved, int64_t &i0, int64_t &i1) {
  i0 = interleaved ? 2 * m : m;
  i1 = interleaved ? 2 * m + 1 : m + rotary_dim / 2;
}

FLASHBOX_HD int64_t rotary_query_position(int64_t cache_len, int64_t i, bool causal_or_window) {
  return cache_len + (causal_or_window ? i : 0);
}

}  // namespace flashbox::kvcache

namespace flashbox::kvcache {

// FP8 e4m3 cache (cache_dtype = FLASHBOX_FLOAT8_E4M3): the descale of batch entry b, KV head g, from an
// fp32 [batch, heads_kv] buffer with strides s0, s1 (0 broadcasts); NULL reads as 1.
FLASHBOX_HD float descale_at(const float *d, int64_t s0, int64_t s1, int64_t b, int64_t g) {
  return d ? d[b * s0 + g * s1] : 1.0f;
}

// An appended value x (k_new or v_new) is stored as e4m3(x / descale): the quotient in fp32, correctly
// rounded (device code uses __fdiv_rn, since the build uses fast math), then round to nearest even
// saturated to +-448; a descale of 0 stores 0 (the quotient is not formed, so the scale of an all-zero
// tensor writes zeros, not NaN).
}  // namespace flashbox::kvcache
