// Masks and score transforms of one attention call, in FlashAttention-2's semantics: the one
// definition every level uses (the fp64 references, the CPU naive/blocked forward and backward, and
// later the CUDA kernels and the KV-cache entry point), so that they cannot drift apart.
//
// For query row i of a sequence with seqlen_q queries and seqlen_k keys, let shift = seqlen_k -
// seqlen_q (bottom-right alignment: the last query sits on the last key). Then
//   visible keys   j with  i + shift - left <= j <= i + shift + right, clamped to [0, seqlen_k);
//                  left/right = -1 mean unbounded on that side; causal means right = 0;
//                  chunk > 0 (attention_chunk) intersects that with the keys of the row's chunk:
//                  c <= j < c + chunk, c = floor((i + shift) / chunk) * chunk;
//                  a row that sees no key gets O = 0, LSE = -inf and no gradient.
//   split s of n   (the forward's num_splits) keys [s * part, min((s + 1) * part, seqlen_k)) only,
//                  part = ceil(seqlen_k / n): one part of a split-key attention, combined later.
//   sink           a learnable sink logit per query head (FlashAttention-4's learnable_sink, in the
//                  units of s) joins every row's softmax denominator as a column with no value:
//                  LSE = log(sum_j exp(s_j) + exp(sink)), O = sum_j exp(s_j - LSE) v_j; a row that
//                  sees no key then has O = 0 and LSE = sink. Its gradient is
//                  dsink = -sum over rows of exp(sink - LSE) * (dO . O).
//   score          s = scale * q_i . k_j
//                  softcap > 0:  s = softcap * tanh(s / softcap)       (after the scale)
//                  ALiBi slope:  s = s - slope * |i + shift - j|        (after the softcap)
//   element rules (flashbox_attention_ext's mask families, in positions of the sequence):
//     prefix p[b]  keys j < p[b] are visible to every row whatever the window, causal or chunk say
//                  (prefix-LM: a union with the range above);
//     documents    then only j with doc_q[b][i] == doc_k[b][j] (an intersection);
//   block table    (flashbox_block_mask, densified by the API) key block j / kv_block of row block
//                  i / q_block is skipped (nothing visible), full (every key visible: no element
//                  rule and no range applies) or partial (the range and element rules above apply);
//   visible(...)   says all of it for one (b, h, i, j); the split's key part intersects everything.
// The backward multiplies dS by the softcap's derivative d(cap tanh(x/cap))/dx = 1 - (s_c/cap)^2,
// where s_c is the capped score before the ALiBi bias; the bias has no gradient.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>

namespace flashbox::core {

// The kind of one (query block, key block) pair of a block mask.
enum BlockKind : uint8_t { kBlockSkipped = 0, kBlockPartial = 1, kBlockFull = 2 };

// A validated flashbox_block_mask as one dense kind per (batch, head, query block, key block),
// built by the API (src/api/block_mask.cpp); batches / heads 1 broadcast.
struct BlockTable {
  const uint8_t *kind = nullptr;  // [batches, heads, q_blocks, kv_blocks]; null: no block mask
  int64_t q_block = 1, kv_block = 1, q_blocks = 0, kv_blocks = 0, batches = 1, heads = 1;

  uint8_t at(int64_t b, int64_t h, int64_t qb, int64_t kb) const {
    return kind[(((batches == 1 ? 0 : b) * heads + (heads == 1 ? 0 : h)) * q_blocks + qb) * kv_blocks + kb];
  }
  // The table of batch entry b alone (for a per-sequence call whose batch index is 0).
  BlockTable entry(int64_t b) const {
    BlockTable t = *this;
    if (kind && batches > 1) t.kind += b * heads * q_blocks * kv_blocks, t.batches = 1;
    return t;
  }
};

struct ScoreMods {
  int64_t window_left = -1, window_right = -1;       // -1: unbounded; with causal, window_right is 0
  float softcap = 0.0f;                              // 0: off
  const float *alibi_slopes = nullptr;               // fp32 [heads_q] or [batch, heads_q]; null: off
  int64_t alibi_batch_stride = 0;                    // elements between batches' slopes (0: shared)
  int64_t chunk = 0;                                 // attention_chunk: 0 off, else the chunk's keys
  const float *sinks = nullptr;                      // fp32 [heads_q] sink logits; null: none
  int64_t split = 0, splits = 1;                     // this call computes key part `split` of `splits`
  const int32_t *doc_q = nullptr, *doc_k = nullptr;  // document ids [batch, seqlen]; null: off
  int64_t doc_q_stride = 0, doc_k_stride = 0;        // elements between batch entries' ids
  const int32_t *prefix = nullptr;                   // prefix-LM lengths [batch]; null: off
  BlockTable blocks;                                 // block sparsity; blocks.kind null: off

  bool has_window() const { return window_left >= 0 || window_right >= 0; }
  // Documents, a prefix or a block table make a row's visible keys more than one range, so the
  // levels test visible() element by element inside the bounds of row_keys / key_rows.
  bool elementwise() const { return doc_q || prefix || blocks.kind; }
  // The slope of (batch b, query head h), 0 without ALiBi.
  float slope(int64_t b, int64_t h) const { return alibi_slopes ? alibi_slopes[b * alibi_batch_stride + h] : 0.0f; }
  // The sink logit of query head h, -inf without sinks (exp(-inf) = 0: no sink).
  float sink(int64_t h) const { return sinks ? sinks[h] : -INFINITY; }
};

// Mods of a call with only the fixed-length causal flag (the original C API).
inline ScoreMods causal_mods(bool causal) {
  ScoreMods m;
  if (causal) m.window_right = 0;
  return m;
}

// floor(x / n) * n for n > 0 and any sign of x: the first position of x's chunk.
inline int64_t chunk_start(int64_t x, int64_t n) {
  const int64_t r = x % n;
  return x - (r < 0 ? r + n : r);
}

// The keys of the call's split: [split_begin, split_end) (all of them with one split).
inline int64_t split_begin(const ScoreMods &m, int64_t seqlen_k) {
  return m.splits <= 1 ? 0 : std::min(seqlen_k, m.split * ((seqlen_k + m.splits - 1) / m.splits));
}
inline int64_t split_end(const ScoreMods &m, int64_t seqlen_k) {
  return m.splits <= 1 ? seqlen_k : std::min(seqlen_k, (m.split + 1) * ((seqlen_k + m.splits - 1) / m.splits));
}

// First visible key of row i (clamped to [0, seqlen_k]).
inline int64_t key_begin(const ScoreMods &m, int64_t i, int64_t seqlen_q, int64_t seqlen_k) {
  const int64_t pos = i + seqlen_k - seqlen_q;
  int64_t begin = m.window_left < 0 ? 0 : pos - m.window_left;
  if (m.chunk > 0) begin = std::max(begin, chunk_start(pos, m.chunk));
  begin = std::max(begin, split_begin(m, seqlen_k));
  return std::clamp<int64_t>(begin, 0, seqlen_k);
}
// One past the last visible key of row i (clamped to [0, seqlen_k]); key_end <= key_begin: no key.
inline int64_t key_end(const ScoreMods &m, int64_t i, int64_t seqlen_q, int64_t seqlen_k) {
  const int64_t pos = i + seqlen_k - seqlen_q;
  int64_t end = m.window_right < 0 ? seqlen_k : pos + m.window_right + 1;
  if (m.chunk > 0) end = std::min(end, chunk_start(pos, m.chunk) + m.chunk);
  end = std::min(end, split_end(m, seqlen_k));
  return std::clamp<int64_t>(end, 0, seqlen_k);
}
// The rows that see key j: [query_begin, query_end) (clamped to [0, seqlen_q]), the transpose of
// the two functions above, for the backward's walk over K/V blocks. Both bounds never decrease with
// j (and key_begin / key_end never decrease with i), which the blocked levels rely on. A split (the
// forward's num_splits) is not in them: the backward takes no split.
inline int64_t query_begin(const ScoreMods &m, int64_t j, int64_t seqlen_q, int64_t seqlen_k) {
  const int64_t shift = seqlen_k - seqlen_q;
  int64_t begin = m.window_right < 0 ? 0 : j - shift - m.window_right;
  if (m.chunk > 0) begin = std::max(begin, chunk_start(j, m.chunk) - shift);
  return std::clamp<int64_t>(begin, 0, seqlen_q);
}
inline int64_t query_end(const ScoreMods &m, int64_t j, int64_t seqlen_q, int64_t seqlen_k) {
  const int64_t shift = seqlen_k - seqlen_q;
  int64_t end = m.window_left < 0 ? seqlen_q : j - shift + m.window_left + 1;
  if (m.chunk > 0) end = std::min(end, chunk_start(j, m.chunk) + m.chunk - shift);
  return std::clamp<int64_t>(end, 0, seqlen_q);
}

// Whether row i of batch entry b, query head h, sees key j: the whole definition above.
inline bool visible(const ScoreMods &m, int64_t b, int64_t h, int64_t i, int64_t j, int64_t seqlen_q,
                    int64_t seqlen_k) {
  if (j < split_begin(m, seqlen_k) || j >= split_end(m, seqlen_k)) return false;
  if (m.blocks.kind) {
    const uint8_t kind = m.blocks.at(b, h, i / m.blocks.q_block, j / m.blocks.kv_block);
    if (kind == kBlockFull) return true;
    if (kind == kBlockSkipped) return false;
  }
  if (m.doc_q && m.doc_q[b * m.doc_q_stride + i] != m.doc_k[b * m.doc_k_stride + j]) return false;
  if (m.prefix && j < m.prefix[b]) return true;
  return j >= key_begin(m, i, seqlen_q, seqlen_k) && j < key_end(m, i, seqlen_q, seqlen_k);
}

// Bounds the blocked levels walk: [begin, end) of the keys some row of [i0, i1) may see, and of
// the rows some key of [j0, j1) may be seen by (supersets; visible() decides inside them when
// m.elementwise()). Without element rules they are the key_begin / query_begin bounds above.
struct Range {
  int64_t begin, end;
};
inline Range row_keys(const ScoreMods &m, int64_t b, int64_t i0, int64_t i1, int64_t seqlen_q, int64_t seqlen_k) {
  if (m.blocks.kind) return {split_begin(m, seqlen_k), split_end(m, seqlen_k)};
  Range r{key_begin(m, i0, seqlen_q, seqlen_k), key_end(m, i1 - 1, seqlen_q, seqlen_k)};
  if (m.prefix && m.prefix[b] > 0) {
    r.begin = split_begin(m, seqlen_k);
    r.end = std::max(r.end, std::min<int64_t>(m.prefix[b], split_end(m, seqlen_k)));
  }
  return r;
}
inline Range key_rows(const ScoreMods &m, int64_t b, int64_t j0, int64_t j1, int64_t seqlen_q, int64_t seqlen_k) {
  if (m.blocks.kind) return {0, seqlen_q};
  // A block holding a prefix key is seen by every row; past the prefix, by the range's rows.
  if (m.prefix && j0 < m.prefix[b]) return {0, seqlen_q};
  return {query_begin(m, j0, seqlen_q, seqlen_k), query_end(m, j1 - 1, seqlen_q, seqlen_k)};
}

// What a tile of rows [i0, i1) x keys [j0, j1) of (b, h) needs from the element mask, for the
// blocked levels: nothing visible (skip it), every element visible (no mask), or visible() per
// element. Decided from the block table alone; without one, `mixed`.
enum class TileMask { skip, all, mixed };
inline TileMask tile_mask(const ScoreMods &m, int64_t b, int64_t h, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                          int64_t seqlen_k) {
  if (!m.blocks.kind) return TileMask::mixed;
  const BlockTable &t = m.blocks;
  bool any = false, all_full = true;
  for (int64_t qb = i0 / t.q_block; qb <= (i1 - 1) / t.q_block; ++qb)
    for (int64_t kb = j0 / t.kv_block; kb <= (j1 - 1) / t.kv_block; ++kb) {
      const uint8_t kind = t.at(b, h, qb, kb);
      any |= kind != kBlockSkipped;
      all_full &= kind == kBlockFull;
    }
  if (!any) return TileMask::skip;
  const bool in_split = j0 >= split_begin(m, seqlen_k) && j1 <= split_end(m, seqlen_k);
  return all_full && in_split ? TileMask::all : TileMask::mixed;
}

// The score transform after the scale: softcap, then the ALiBi bias (slope 0: none). Templated on
// the precision so the fp64 references and the fp32 levels share it.
template <class F>
inline F capped_score(F s, F softcap) {
  return softcap > F(0) ? softcap * std::tanh(s / softcap) : s;
}
template <class F>
inline F alibi_bias(F slope, int64_t i, int64_t j, int64_t seqlen_q, int64_t seqlen_k) {
  const int64_t rel = i + seqlen_k - seqlen_q - j;
  return -slope * F(rel < 0 ? -rel : rel);
}
// d(capped)/d(s) expressed through the capped score: 1 - (capped / softcap)^2 (1 without softcap).
template <class F>
inline F softcap_grad(F capped, F softcap) {
  if (!(softcap > F(0))) return F(1);
  const F t = capped / softcap;
  return F(1) - t * t;
}

}  // namespace flashbox::core
