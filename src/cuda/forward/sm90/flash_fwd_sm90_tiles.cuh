// The Hopper forward's tiles and ranges (flash_fwd_sm90_kernel.cuh opens with the design): a work tile decoded from its index (fixed length: head by head, longest
// query block first; varlen: the device-built list), the mask families' per-tile walk (mask_walk.cuh),
// the K/V block range a tile and each consumer warpgroup's 64 rows can see under the window and the
// causal diagonal, the window's mask on one warpgroup's scores, and the mask families' per-tile need
// and element rule. The producer and the consumers call the same functions, so they agree on every
// tile's blocks.
#pragma once
#include <cuda.h>
#include <cstdint>

#include "cuda/common/score_mods.cuh"
#include "cuda/common/varlen_span.cuh"
#include "cuda/forward/sm90/flash_fwd_sm90_config.cuh"
#include "cuda/forward/sm90/flash_fwd_sm90_pipeline.cuh"
#include "cuda/forward/sm90/mask_walk.cuh"
#include "cuda/hopper/fragment.cuh"
#include "cuda/hopper/wgmma.cuh"

namespace flashbox::sm90 {

// Tile order (fixed length): L2 sections of heads, longest query block first inside one, walked by
// the CTAs in a snake over rounds (flash_fwd_sm90_pipeline.cuh: decode_fixed_tile, tile_position;
// the fp8 forward walks the same order).
// Varlen: the tile list is ordered by work instead (longest first, head by head inside a work level;
// varlen_tile_list).
// A tile carries its sequence's span: q0/k0, the sequence's first token in the packed tensors (0 for
// fixed length), and its lengths sq/sk.
struct Tile {
  int m_block, h, b;
  int q0, k0, sq, sk;
};
__device__ __forceinline__ Tile decode_tile(const FwdParams &p, int t) {
  if (p.cu_q != nullptr) {
    const int2 entry = p.tiles[t];
    const int m = entry.y / p.heads_q;
    const cuda::VarlenSpan s =
        cuda::varlen_span(p.cu_q, p.cu_k, entry.x, p.total_q, p.total_k, p.max_q, p.max_k);
    return {m, entry.y - m * p.heads_q, entry.x, s.q0, s.k0, s.seqlen_q, s.seqlen_k};
  }
  const FixedTile f = decode_fixed_tile(t, p.num_m_blocks, p.num_tiles / p.num_m_blocks, p.section_heads, p.heads_q);
  return {f.m_block, f.h, f.b, 0, 0, p.seqlen_q, p.seqlen_k};
}
// The tiles this launch walks: the list's count for varlen (written on the device), else all.
__device__ __forceinline__ int tiles_to_walk(const FwdParams &p) {
  return p.tile_count != nullptr ? min(*p.tile_count, p.num_tiles) : p.num_tiles;
}
// The tile with the EXT configurations' used lengths (seqused_q/k clamp sq and sk); the plain
// configurations' decode_tile.
template <class Cfg>
__device__ __forceinline__ Tile decode_tile_of(const FwdParams &p, int t) {
  Tile tile = decode_tile(p, t);
  if constexpr (Cfg::EXT) cuda::ext_used_lengths(p.ext, tile.b, tile.sq, tile.sk);
  return tile;
}
// EXT: the K/V tiles the tile's query block visits (mask_walk.cuh), the same for the producer and
// every consumer warpgroup. With document ids the walk reads the block's doc span (doc_spans.cuh).
template <class Cfg>
__device__ __forceinline__ ExtWalk tile_walk(const FwdParams &p, const Tile &t) {
  int doc_begin = 0, doc_end = t.sk;
  if (p.ext.doc_q != nullptr && t.m_block * Cfg::BM < t.sq) {
    const int2 span = p.doc_spans[int64_t(t.b) * p.doc_span_blocks + t.m_block];
    doc_begin = span.x, doc_end = span.y;
  }
  return ext_walk(p.mods, p.ext, t.b, t.h, t.m_block, Cfg::BM, Cfg::BN, t.sq, t.sk, doc_begin, doc_end);
}
// The TMA batch coordinate of a tile (varlen: the packed tensors are one batch entry).
__device__ __forceinline__ int tma_batch(const FwdParams &p, const Tile &t) { return p.cu_q != nullptr ? 0 : t.b; }

// The K/V blocks one query block visits: [n_begin, n_end), walked from the last down; those outside
// [full_begin, full_end) need a mask (some row of the block does not see all of their keys).
struct BlockRange {
  int n_begin, n_end, full_begin, full_end;
  __device__ __forceinline__ int count() const { return n_end - n_begin; }
  __device__ __forceinline__ bool masked(int n) const { return n < full_begin || n >= full_end; }
};

// The keys some row of the block sees: from key_begin(first row) to key_end(last row); the keys every
// row sees: from key_begin(last row) to key_end(first row) (rows past seqlen_q do not count: their
// results are never stored). With a window only the first and last blocks of a row's span are masked.
__device__ __forceinline__ BlockRange block_range(const cuda::DeviceMods &mods, int m_block, int BM, int BN, int sq,
                                                  int sk) {
  const int shift = sk - sq;
  const int r_first = m_block * BM, r_last = min(r_first + BM, sq) - 1;
  const int some_begin = cuda::mods_key_begin(mods, r_first, shift, sk);
  const int some_end = cuda::mods_key_end(mods, r_last, shift, sk);
  if (some_end <= some_begin) return {0, 0, 0, 0};
  const int all_begin = cuda::mods_key_begin(mods, r_last, shift, sk);
  const int all_end = cuda::mods_key_end(mods, r_first, shift, sk);
  return {some_begin / BN, (some_end + BN - 1) / BN, (all_begin + BN - 1) / BN, all_end / BN};
}

// The blocks of a tile's walk that one consumer warpgroup's 64 rows, from row_first, see: a sub-range
// of the tile's (rows are monotone in both window edges), empty when the group's rows all lie past
// seqlen_q. In a 192-row tile a window edge or the causal diagonal spans two or three 128-key blocks,
// and some group sees none of one of them: it skips that block's products (Consumer::skip_block).
__device__ __forceinline__ BlockRange group_range(const cuda::DeviceMods &mods, int row_first, int BN, int sq, int sk) {
  if (row_first >= sq) return {0, 0, 0, 0};
  return block_range(mods, row_first / 64, 64, BN, sq, sk);
}

// Sets scores to -inf where the column (relative to this thread's first column) is outside the row's
// visible keys [begin, end): the causal diagonal or a sliding window's edges, and the end of the keys.
template <int NS>
__device__ __forceinline__ void mask_window(float (&s)[NS], int begin0, int end0, int begin1, int end1) {
#pragma unroll
  for (int i = 0; i < NS; ++i) {
    const int c = acc_col(i);
    if (c >= (acc_half(i) ? end1 : end0) || c < (acc_half(i) ? begin1 : begin0)) s[i] = -INFINITY;
  }
}


// EXT: a tile's need (ext_classify_tile) applied to one thread's scores of one warpgroup: every score
// dead, the end of the used keys, the rows' bounds, or the element rule with the documents and a mask
// mod's bits from the column bits match0 / match1 (bit ext_doc_bit(i) of score i); first_col is the
// thread's first column's key.
template <int NS>
__device__ __forceinline__ void ext_mask_scores(float (&s)[NS], int need, int first_col, int sk, int prefix,
                                                uint32_t match0, uint32_t match1, int begin0, int end0, int begin1,
                                                int end1) {
  if (need == kNeedAll) {
#pragma unroll
    for (int i = 0; i < NS; ++i) s[i] = -INFINITY;
  } else if (need == kNeedEnd) {
    mask_window(s, -first_col, sk - first_col, -first_col, sk - first_col);
  } else if (need == kNeedBounds) {
    mask_window(s, begin0 - first_col, end0 - first_col, begin1 - first_col, end1 - first_col);
  } else {  // the element rule, documents and the mod's bits from the column bits (ext_classify_tile)
#pragma unroll
    for (int i = 0; i < NS; ++i) {
      const bool h = acc_half(i);
      const uint32_t same_doc = ((h ? match1 : match0) >> ext_doc_bit(i)) & 1u;
      if (!same_doc ||
          !ext_key_visible(first_col + acc_col(i), sk, nullptr, 0, prefix, h ? begin1 : begin0, h ? end1 : end0))
        s[i] = -INFINITY;
    }
  }
}

// EXT: what K/V tile n (of kind `kind`, BN keys) needs of the mask: the largest need over the warp's
// rows (mask_walk.cuh), warp-uniform. sk: the used keys; prefix; b: the batch entry (the sequence);
// row0 / row1: this thread's two rows clamped to the used ones; begin / end: their key bounds. With
// documents the warp reads the tile's key ids, BN / 32 a lane (keys past the used ones count as
// matching: the bounds hide them), and the tile matches when all of them are the warp's one document:
// the common case inside a packed document, which then runs unmasked (or with the window's bounds
// only). Otherwise each thread gathers its 32 columns' ids from the lanes that read them (shuffles:
// reading them from global memory score by score held 64 loads in flight and spilled, ptxas -v) into
// one bit per column and row (match0 / match1, left as ~0 when the documents match or there are none).
// mod: a partial block's mask-mod bits (mask_walk.cuh), this thread's first row's at the tile's first
// key (its second row 8 rows on, mod_words words a row), or null: two 16-byte loads, compacted to the
// same bits (ext_mod_byte) and ANDed into match0 / match1; the tile needs the element rule unless
// the mod admits all of the warp's keys.
template <int BN>
__device__ __forceinline__ int ext_classify_tile(const FwdParams &p, int n, int kind, int lane, int sk, int prefix,
                                                 int b, int row0, int row1, int begin0, int end0, int begin1,
                                                 int end1, const uint32_t *mod, int mod_words, uint32_t &match0,
                                                 uint32_t &match1) {
  if (kind == kTileDead) return kNeedAll;
  const int k0 = n * BN;
  if (kind == kTileFull) return k0 + BN > sk ? kNeedEnd : kNeedNone;
  bool docs_match = true;
  match0 = match1 = ~0u;
  if (p.ext.doc_q != nullptr) {
    // The sequence's ids: batch entry b's (fixed length), or from its first token (varlen: the
    // strides are 0; the first tokens clamped as varlen_span clamps them).
    const int q0 = p.cu_q != nullptr ? cuda::span_clamp(p.cu_q[b], 0, p.total_q) : 0;
    const int k0s = p.cu_q != nullptr ? cuda::span_clamp(p.cu_k[b], 0, p.total_k) : 0;
    const int32_t *doc_q = p.ext.doc_q + int64_t(b) * p.ext.doc_q_stride + q0;
    const int32_t *doc_k = p.ext.doc_k + int64_t(b) * p.ext.doc_k_stride + k0s;
    const int doc0 = doc_q[row0], doc1 = doc_q[row1];
    const int warp_doc = __shfl_sync(0xffffffffu, doc0, 0);
    int kd[BN / 32];
    bool ok = doc0 == warp_doc && doc1 == warp_doc;
#pragma unroll
    for (int e = 0; e < BN / 32; ++e) {
      const int j = k0 + lane + 32 * e;
      kd[e] = j < sk ? doc_k[j] : warp_doc;
      ok = ok && kd[e] == warp_doc;
    }
    docs_match = __all_sync(0xffffffffu, ok);
    if (!docs_match) {
      // Bit c: the key that lane ext_doc_bit_lane(c, lane) read into kd[ext_doc_bit_reg(c)].
      uint32_t m0 = 0, m1 = 0;
#pragma unroll
      for (int c = 0; c < BN / 4; ++c) {
        const int id = __shfl_sync(0xffffffffu, kd[ext_doc_bit_reg(c)], ext_doc_bit_lane(c, lane));
        m0 |= uint32_t(id == doc0) << c;
        m1 |= uint32_t(id == doc1) << c;
      }
      match0 = m0, match1 = m1;
    }
  }
  if (mod != nullptr) {
    static_assert(BN == 128, "a mod's row of the tile: one 16-byte load");
    uint32_t m0, m1;
    ext_mod_rows(mod, mod_words, lane, m0, m1);
    match0 &= m0, match1 &= m1;
    docs_match = __all_sync(0xffffffffu, (m0 & m1) == ~0u) && docs_match;  // (every lane reaches the vote)
  }
  const int need = max(ext_tile_need(k0, BN, begin0, end0, prefix, docs_match),
                       ext_tile_need(k0, BN, begin1, end1, prefix, docs_match));
  return int(__reduce_max_sync(0xffffffffu, unsigned(need)));
}

}  // namespace flashbox::sm90
