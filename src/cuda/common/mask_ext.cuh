// The extension's mask families on the device (flashbox_attention_ext: attention_chunk, seqused_q/k,
// document ids, prefix-LM lengths, block masks, mask mods), for the sm80 forward and backward and
// the sm90 mask-family kernels. The semantics are core/masks.hpp's (read it first): this file is
// their form in registers, as score_mods.cuh is for the window, softcap and ALiBi.
//
// For query row i of a sequence (positions of the sequence; with seqused its used rows) and key j:
//   block mask   key block j / kv_block of row block i / q_block listed "full": visible (no other
//                rule); listed "partial": the element rule below; listed in neither: not visible;
//   element rule (doc_q[i] == doc_k[j]) and (j < prefix or (window and chunk admit (i, j)));
//   mask mod     in a partial block, also the mod's bit for (i, j) (mod_tile / mod_bit).
// The tables are device memory the host never reads (as cu_seqlens: flashbox.h, "Variable length"),
// so every value read is clamped before it forms an address: seqused to [0, the length], a prefix
// to [0, seqlen_k], a block count to [0, min(max_kv_blocks, num_kv_blocks)]; a listed block index
// outside [0, num_kv_blocks) is skipped. Malformed tables so give unspecified values in the rows
// they name, never an access outside the tensors. A block listed twice is visited twice (its keys
// counted twice): unspecified values too.
// Host and device (as varlen_span.cuh): tests/api/mask_ext_test.cpp checks these rules on the CPU
// against core::visible. The window comes from any type with window_left / window_right (the
// kernels' DeviceMods), so this header needs no CUDA.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define FLASHBOX_MASK_HD __host__ __device__ __forceinline__
#else
#define FLASHBOX_MASK_HD inline
#endif

namespace flashbox::cuda {

struct DeviceMaskExt {
  int chunk = 0;                                             // attention_chunk; 0: off
  const int32_t *doc_q = nullptr, *doc_k = nullptr;          // document ids; null: off
  int64_t doc_q_stride = 0, doc_k_stride = 0;                // fixed length: elements per batch entry (varlen 0)
  const int32_t *prefix = nullptr;                           // prefix-LM lengths [batch]; null: off
  const int32_t *seqused_q = nullptr, *seqused_k = nullptr;  // [batch]; null: off
  // Block mask (fixed length only): FlexAttention's BlockMask lists, row (b, h, q block).
  const int32_t *kv_num = nullptr, *kv_idx = nullptr;      // partial blocks; kv_num null: no block mask
  const int32_t *full_num = nullptr, *full_idx = nullptr;  // full blocks; null: none
  int bm_batch = 1, bm_heads = 1;                          // 1: broadcast
  int q_block = 1, kv_block = 1;                           // multiples of the kernel tiles (plan checks)
  int max_kv = 0, num_q_blocks = 0, num_kv_blocks = 0;
  // A mask mod (flashbox_attention_ext.mask_mod), the third mask source beside the element rule and
  // the block lists: one bit tile of q_block x kv_block bits (row-major, kv_block / 32 words a row,
  // bit c % 32 of word c / 32 is key c of the block) per partial entry of a block-mask row, which a
  // partial tile ANDs with the element rule. Tile row (b, h, q block) of the mod's own broadcast
  // (mod_batch / mod_heads 1: one tile row for every batch entry / query head) holds its partial
  // entries' tiles from tile mod_tile_base[tile row] on, in the row's list order. Written by the
  // mod's NVRTC kernels (src/api/mask_mod_tiles.hpp) before the attention kernels run.
  const uint32_t *mod_bits = nullptr;      // null: no mask mod
  const int64_t *mod_tile_base = nullptr;  // [mod_batch * mod_heads * num_q_blocks + 1]
  int mod_batch = 1, mod_heads = 1;

  FLASHBOX_MASK_HD bool blocks() const { return kv_num != nullptr; }
  // Rules that make a row's visible keys more than one range: tested element by element.
  FLASHBOX_MASK_HD bool elementwise() const { return doc_q != nullptr || prefix != nullptr || kv_num != nullptr; }
  FLASHBOX_MASK_HD bool any() const {
    return chunk > 0 || elementwise() || seqused_q != nullptr || seqused_k != nullptr;
  }
};

FLASHBOX_MASK_HD int ext_clamp(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }
FLASHBOX_MASK_HD int ext_min(int a, int b) { return a < b ? a : b; }
FLASHBOX_MASK_HD int ext_max(int a, int b) { return a > b ? a : b; }

// The window's bounds (score_mods.cuh's mods_key_* / mods_query_*, for any mods type).
template <class Mods>
FLASHBOX_MASK_HD int window_key_begin(const Mods &m, int i, int shift, int seqlen_k) {
  return m.window_left < 0 ? 0 : ext_clamp(i + shift - m.window_left, 0, seqlen_k);
}
template <class Mods>
FLASHBOX_MASK_HD int window_key_end(const Mods &m, int i, int shift, int seqlen_k) {
  return m.window_right < 0 ? seqlen_k : ext_clamp(i + shift + m.window_right + 1, 0, seqlen_k);
}
template <class Mods>
FLASHBOX_MASK_HD int window_query_begin(const Mods &m, int j, int shift, int seqlen_q) {
  return m.window_right < 0 ? 0 : ext_clamp(j - shift - m.window_right, 0, seqlen_q);
}
template <class Mods>
FLASHBOX_MASK_HD int window_query_end(const Mods &m, int j, int shift, int seqlen_q) {
  return m.window_left < 0 ? seqlen_q : ext_clamp(j - shift + m.window_left + 1, 0, seqlen_q);
}

// floor(x / n) * n for n > 0 and any sign of x.
FLASHBOX_MASK_HD int ext_chunk_start(int x, int n) {
  const int r = x % n;
  return x - (r < 0 ? r + n : r);
}

// The used lengths of batch entry b (seqused, clamped to the sequence's lengths).
FLASHBOX_MASK_HD void ext_used_lengths(const DeviceMaskExt &x, int b, int &seqlen_q, int &seqlen_k) {
  if (x.seqused_q) seqlen_q = ext_clamp(x.seqused_q[b], 0, seqlen_q);
  if (x.seqused_k) seqlen_k = ext_clamp(x.seqused_k[b], 0, seqlen_k);
}
// Keys j < the result are visible to every row of batch entry b (0 without a prefix).
FLASHBOX_MASK_HD int ext_prefix(const DeviceMaskExt &x, int b, int seqlen_k) {
  return x.prefix ? ext_clamp(x.prefix[b], 0, seqlen_k) : 0;
}

// The window's and the chunk's bounds of row i: [begin, end) within [0, seqlen_k]. Both never
// decrease with i (the kernels take the first row's begin and the last row's end for a tile).
template <class Mods>
FLASHBOX_MASK_HD int ext_key_begin(const Mods &m, const DeviceMaskExt &x, int i, int shift, int seqlen_k) {
  int begin = window_key_begin(m, i, shift, seqlen_k);
  if (x.chunk > 0) begin = ext_max(begin, ext_clamp(ext_chunk_start(i + shift, x.chunk), 0, seqlen_k));
  return begin;
}
template <class Mods>
FLASHBOX_MASK_HD int ext_key_end(const Mods &m, const DeviceMaskExt &x, int i, int shift, int seqlen_k) {
  int end = window_key_end(m, i, shift, seqlen_k);
  if (x.chunk > 0) end = ext_min(end, ext_clamp(ext_chunk_start(i + shift, x.chunk) + x.chunk, 0, seqlen_k));
  return end;
}

// The rows that see key j by the window and the chunk: [begin, end) within [0, seqlen_q] (the
// backward's walk); both never decrease with j.
template <class Mods>
FLASHBOX_MASK_HD int ext_query_begin(const Mods &m, const DeviceMaskExt &x, int j, int shift, int seqlen_q) {
  int begin = window_query_begin(m, j, shift, seqlen_q);
  if (x.chunk > 0) begin = ext_max(begin, ext_clamp(ext_chunk_start(j, x.chunk) - shift, 0, seqlen_q));
  return begin;
}
template <class Mods>
FLASHBOX_MASK_HD int ext_query_end(const Mods &m, const DeviceMaskExt &x, int j, int shift, int seqlen_q) {
  int end = window_query_end(m, j, shift, seqlen_q);
  if (x.chunk > 0) end = ext_min(end, ext_clamp(ext_chunk_start(j, x.chunk) + x.chunk - shift, 0, seqlen_q));
  return end;
}

// The element rule (no block mask, or a partial block): row i < seqlen_q, key j. doc_q / doc_k point
// at the sequence's first id (null: no documents).
template <class Mods>
FLASHBOX_MASK_HD bool ext_visible(const Mods &m, const DeviceMaskExt &x, const int32_t *doc_q, const int32_t *doc_k,
                                  int prefix, int i, int j, int shift, int seqlen_q, int seqlen_k) {
  if (i < 0 || i >= seqlen_q || j < 0 || j >= seqlen_k) return false;
  if (doc_q && doc_q[i] != doc_k[j]) return false;
  if (j < prefix) return true;
  return j >= ext_key_begin(m, x, i, shift, seqlen_k) && j < ext_key_end(m, x, i, shift, seqlen_k);
}

// Block mask: the list row of (b, h, q block qb) and its clamped counts.
struct BlockRow {
  int64_t base;  // element offset of the row in kv_idx / full_idx
  int partial, full;
};
FLASHBOX_MASK_HD BlockRow block_row(const DeviceMaskExt &x, int b, int h, int qb) {
  const int bb = x.bm_batch == 1 ? 0 : b, hh = x.bm_heads == 1 ? 0 : h;
  const int64_t row = (int64_t(bb) * x.bm_heads + hh) * x.num_q_blocks + qb;
  const int cap = ext_min(x.max_kv, x.num_kv_blocks);
  BlockRow r;
  r.base = row * x.max_kv;
  r.partial = ext_clamp(x.kv_num[row], 0, cap);
  r.full = x.full_num ? ext_clamp(x.full_num[row], 0, cap) : 0;
  return r;
}
// The bit tile of partial entry e of row (b, h, qb), or null without a mask mod, moved to the
// origin (r0, c0) inside the block (r0 a row of the block, c0 a key of it, a multiple of 32): the
// kernels move it to the pair they mask once, so each element's bit is one multiply and a shift.
FLASHBOX_MASK_HD const uint32_t *mod_tile(const DeviceMaskExt &x, int b, int h, int qb, int e, int r0 = 0, int c0 = 0) {
  if (!x.mod_bits) return nullptr;
  const int bb = x.mod_batch == 1 ? 0 : b, hh = x.mod_heads == 1 ? 0 : h;
  const int64_t row = (int64_t(bb) * x.mod_heads + hh) * x.num_q_blocks + qb;
  const int64_t words = x.kv_block / 32;
  return x.mod_bits + (x.mod_tile_base[row] + e) * (int64_t(x.q_block) * words) + r0 * words + c0 / 32;
}
// The mod's bit for row i and key j (positions of the sequence) in `tile` (i's q block and j's key
// block, not moved); true without a tile. The forward's form.
FLASHBOX_MASK_HD bool mod_bit(const DeviceMaskExt &x, const uint32_t *tile, int i, int j) {
  if (!tile) return true;
  const int r = i % x.q_block, c = j % x.kv_block;
  return (tile[int64_t(r) * (x.kv_block / 32) + c / 32] >> (c % 32)) & 1u;
}
// The word of `tile` (moved, `words` words a row: kv_block / 32) that holds row r's keys c & ~31 ..
// c | 31, counted from its origin: key c's bit is bit c & 31 of it. The sm90 backward reads a row's
// word once for the thread's two keys (they share it) where it has no DeviceMaskExt.
FLASHBOX_MASK_HD uint32_t mod_word(const uint32_t *tile, int words, int r, int c) {
  return tile[int64_t(r) * words + (c >> 5)];
}
// The same for row r and key c counted from the origin of `tile` (r, c >= 0). The backward's form:
// no division per element. (Each kernel keeps the form with which ptxas spilled
// least, -Xptxas -v on sm_80.)
FLASHBOX_MASK_HD bool mod_bit_from(const DeviceMaskExt &x, const uint32_t *tile, int r, int c) {
  if (!tile) return true;
  return (mod_word(tile, x.kv_block / 32, r, c) >> (c & 31)) & 1u;
}

// Entry e of a row (partial entries first, then full): the key block, or -1 for an index out of
// range. *full says which list it came from.
FLASHBOX_MASK_HD int block_entry(const DeviceMaskExt &x, const BlockRow &r, int e, bool *full) {
  *full = e >= r.partial;
  const int c = *full ? x.full_idx[r.base + (e - r.partial)] : x.kv_idx[r.base + e];
  return c >= 0 && c < x.num_kv_blocks ? c : -1;
}

enum : int { kExtBlockSkipped = 0, kExtBlockPartial = 1, kExtBlockFull = 2 };
// The kind of key block kb in the row of (b, h, qb): a walk over the row's lists (the backward's
// lookup; rows hold at most num_kv_blocks entries). A block listed in both counts as full, as the
// CPU's dense table (filled partial, then full) says.
// *entry: the partial entry's index in the row (the mod's bit tile), -1 otherwise.
FLASHBOX_MASK_HD int block_kind(const DeviceMaskExt &x, int b, int h, int qb, int kb, int *entry) {
  *entry = -1;
  if (qb < 0 || qb >= x.num_q_blocks) return kExtBlockSkipped;
  const BlockRow r = block_row(x, b, h, qb);
  for (int e = 0; e < r.full; ++e)
    if (x.full_idx[r.base + e] == kb) return kExtBlockFull;
  for (int e = 0; e < r.partial; ++e)
    if (x.kv_idx[r.base + e] == kb) return *entry = e, kExtBlockPartial;
  return kExtBlockSkipped;
}
FLASHBOX_MASK_HD int block_kind(const DeviceMaskExt &x, int b, int h, int qb, int kb) {
  int entry;
  return block_kind(x, b, h, qb, kb, &entry);
}

#if defined(__CUDACC__)
// Documents: the positions p in [begin, end) whose id other_ids[p] lies within the range of the ids
// rows_ids[r0 .. r1) ([min, max]), as [*span_begin, *span_end) (empty: both 0). A superset of the
// positions that share a document with some row, exact for sorted (packed) documents. Called by
// every thread of the CTA (it synchronises), once per CTA. id_lo / id_hi (optional): the rows' id
// range (INT_MAX / INT_MIN without rows).
template <int kThreads>
__device__ inline void doc_span(const int32_t *rows_ids, int r0, int r1, const int32_t *other_ids, int begin, int end,
                                int *span_begin, int *span_end, int *id_lo = nullptr, int *id_hi = nullptr) {
  __shared__ int bounds[4];  // rows' min and max id, first and last matching position
  if (threadIdx.x == 0) bounds[0] = 0x7fffffff, bounds[1] = -0x7fffffff - 1, bounds[2] = 0x7fffffff, bounds[3] = -1;
  __syncthreads();
  int lo = 0x7fffffff, hi = -0x7fffffff - 1;
  for (int r = r0 + int(threadIdx.x); r < r1; r += kThreads) lo = ext_min(lo, rows_ids[r]), hi = ext_max(hi, rows_ids[r]);
  atomicMin(&bounds[0], lo);
  atomicMax(&bounds[1], hi);
  __syncthreads();
  const int id_lo_all = bounds[0], id_hi_all = bounds[1];
  int first = 0x7fffffff, last = -1;
  for (int q = begin + int(threadIdx.x); q < end; q += kThreads) {
    const int id = other_ids[q];
    if (id >= id_lo_all && id <= id_hi_all) first = ext_min(first, q), last = ext_max(last, q);
  }
  atomicMin(&bounds[2], first);
  atomicMax(&bounds[3], last);
  __syncthreads();
  if (id_lo != nullptr) *id_lo = id_lo_all, *id_hi = id_hi_all;
  *span_begin = bounds[3] < 0 ? 0 : bounds[2];
  *span_end = bounds[3] < 0 ? 0 : bounds[3] + 1;
}
#endif

}  // namespace flashbox::cuda

#undef FLASHBOX_MASK_HD
