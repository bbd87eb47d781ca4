// The sm90 forward's walk with the extension's mask families (cuda/common/mask_ext.cuh; the kernels
// that take them are FwdConfig's EXT variant): which K/V tiles a query block visits, in which order,
// and what each visited tile needs of the mask. The TMA producer and the consumer warpgroups call
// the same functions on the same inputs, so they agree on every tile without talking to each other.
//
// Two walks, as in the sm80 forward (docs/masks.md):
//   range  no block mask: the keys some row of the block may see, [key_begin, key_end): the window's
//          and the chunk's bounds of the first and last row, widened to key 0 and the prefix's end by
//          a prefix, narrowed to the keys of the rows' documents (the doc span, read from the
//          per-block table doc_spans.cuh writes before the launch). Walked from the last tile down,
//          as the plain kernel walks.
//   block  a block mask: the CTA's row of FlexAttention's lists (its rows lie in one mask row block:
//          q_block is a multiple of BM), partial blocks first, then full ones, each kv_block / BN
//          tiles. A listed index out of range, and a tile wholly past the keys (the last block's),
//          are dead: loaded from tile 0 (a legal address) and masked whole.
// What a tile needs (ext_tile_need, per row; the consumers take the largest over a warp's rows, so
// the choice is warp-uniform, and the smaller needs are no-ops under the larger masks):
//   none     every key visible to the row (inside its window and chunk, or all before the prefix,
//            and of its document);
//   bounds   the row's [begin, end) only (the window's edges, the causal diagonal, the chunk's
//            edges, the end of the keys): the plain kernel's mask;
//   element  the element rule, key by key (a document boundary or the prefix's end inside the tile).
// A full block needs only the end of the keys; a dead tile hides every key. With a mask mod
// (DeviceMaskExt::mod_bits) a partial block's tile also ANDs the mod's bits into the element rule:
// the tile of entry e (partial entries come first, so an iteration's entry is it / tiles_per_block)
// moved to the tile's first key; it needs the element rule unless the mod admits every key of the
// warp's rows there.
// Host and device: tests/api/mask_walk_test.cpp runs these walks on the CPU against core::visible.
#pragma once
#include <cstdint>

#include "cuda/common/mask_ext.cuh"

#if defined(__CUDACC__)
#define FLASHBOX_WALK_HD __host__ __device__ __forceinline__
#else
#define FLASHBOX_WALK_HD inline
#endif

namespace flashbox::sm90 {

// The tiles one query block of the EXT kernel visits.
struct ExtWalk {
  int count = 0;            // iterations (tiles, dead ones included)
  int n_end = 0;            // range walk: tiles n_end - 1 down to n_end - count
  int tiles_per_block = 0;  // block walk: kv_block / BN (0: the range walk)
  cuda::BlockRow row{0, 0, 0};
};

// The kind of an iteration's tile.
enum : int { kTileDead = 0, kTileRule = 1, kTileFull = 2 };
// What a tile needs of the mask, in increasing order (a warp applies the largest of its rows').
enum : int { kNeedNone = 0, kNeedBounds = 1, kNeedElement = 2, kNeedEnd = 3, kNeedAll = 4 };

// The walk of query block m_block (BM rows from m_block * bm) of batch entry b, head h, in a
// sequence of sq query and sk key rows (the used lengths). doc_begin / doc_end: the keys of the
// block's documents (doc_spans.cuh; 0 and sk without documents). Empty when the block's rows all
// lie past sq or there is no key.
template <class Mods>
FLASHBOX_WALK_HD ExtWalk ext_walk(const Mods &mods, const cuda::DeviceMaskExt &x, int b, int h, int m_block, int bm,
                                  int bn, int sq, int sk, int doc_begin, int doc_end) {
  ExtWalk w;
  const int r_first = m_block * bm;
  if (r_first >= sq || sk <= 0) return w;
  if (x.blocks()) {
    w.tiles_per_block = x.kv_block / bn;
    w.row = cuda::block_row(x, b, h, r_first / x.q_block);
    w.count = (w.row.partial + w.row.full) * w.tiles_per_block;
    return w;
  }
  const int r_last = cuda::ext_min(r_first + bm, sq) - 1, shift = sk - sq;
  int key_begin = cuda::ext_key_begin(mods, x, r_first, shift, sk);
  int key_end = cuda::ext_key_end(mods, x, r_last, shift, sk);
  const int prefix = cuda::ext_prefix(x, b, sk);
  if (prefix > 0) key_begin = 0, key_end = cuda::ext_max(key_end, prefix);
  if (x.doc_q != nullptr) key_begin = cuda::ext_max(key_begin, doc_begin), key_end = cuda::ext_min(key_end, doc_end);
  if (key_end <= key_begin) return w;
  const int n_begin = key_begin / bn;
  w.n_end = (key_end + bn - 1) / bn;
  w.count = w.n_end - n_begin;
  return w;
}

// Iteration `it` of a walk: the K/V tile to load and its kind (*kind).
FLASHBOX_WALK_HD int ext_walk_tile(const cuda::DeviceMaskExt &x, const ExtWalk &w, int it, int bn, int sk, int *kind) {
  if (w.tiles_per_block == 0) {
    *kind = kTileRule;
    return w.n_end - 1 - it;
  }
  bool full = false;
  const int c = cuda::block_entry(x, w.row, it / w.tiles_per_block, &full);
  const int n = c * w.tiles_per_block + it % w.tiles_per_block;
  if (c < 0 || n * bn >= sk) {
    *kind = kTileDead;
    return 0;
  }
  *kind = full ? kTileFull : kTileRule;
  return n;
}

// What keys [k0, k0 + bn) of a rule tile need for one row: [begin, end) its window's and chunk's
// keys (ext_key_begin / ext_key_end, within [0, sk]), prefix the batch entry's prefix length,
// docs_match whether every key of the tile before sk is of the row's document (true without
// documents).
FLASHBOX_WALK_HD int ext_tile_need(int k0, int bn, int begin, int end, int prefix, bool docs_match) {
  if (!docs_match) return kNeedElement;
  if (k0 + bn <= prefix) return kNeedNone;
  if (k0 < prefix) return kNeedElement;
  return k0 < begin || k0 + bn > end ? kNeedBounds : kNeedNone;
}

// The element rule for one row (ext_visible with the row's bounds precomputed): key j < sk, of the
// row's document (doc_row; doc_k null without documents), before the prefix or inside [begin, end).
FLASHBOX_WALK_HD bool ext_key_visible(int j, int sk, const int32_t *doc_k, int doc_row, int prefix, int begin,
                                      int end) {
  if (j < 0 || j >= sk) return false;
  if (doc_k != nullptr && doc_k[j] != doc_row) return false;
  return j < prefix || (j >= begin && j < end);
}

// The element rule's document bits (the consumer's ext_classify): a thread's score i is column
// 8 (i / 4) + 2 (lane % 4) + i % 2 of the tile (the wgmma accumulator layout, cuda/hopper/fragment.cuh),
// and its bit is ext_doc_bit(i). Lane L holds the ids of keys L + 32 e (e < BN / 32); the key of bit b
// of `lane` is held by lane ext_doc_bit_lane(b, lane) in its register ext_doc_bit_reg(b).
FLASHBOX_WALK_HD int ext_doc_bit(int i) { return 2 * (i >> 2) + (i & 1); }
FLASHBOX_WALK_HD int ext_doc_bit_lane(int b, int lane) { return 8 * ((b >> 1) % 4) + 2 * (lane % 4) + (b & 1); }
FLASHBOX_WALK_HD int ext_doc_bit_reg(int b) { return (b >> 1) / 4; }

// A mask mod's bits in the same order: word w of a bit-tile row (keys 32 w .. 32 w + 31 of the tile,
// bit c % 32 key c) holds the thread's columns 32 w + 8 j + 2 (lane % 4) + o (j < 4, o < 2), which
// are its bits 8 w + 2 j + o; the result is those 8 bits, for bits 8 w .. 8 w + 7 of the row's mask.
FLASHBOX_WALK_HD uint32_t ext_mod_byte(uint32_t word, int lane) {
  const uint32_t x = (word >> (2 * (lane % 4))) & 0x03030303u;  // the column pair of each 8-key group
  const uint32_t z = x | (x >> 6);                               // groups 0, 1 in bits 0..3; 2, 3 in 16..19
  return (z & 0xfu) | ((z >> 12) & 0xf0u);
}
// The thread's 32 column bits of one bit-tile row from the tile's first key (words 0..3: keys 0..127).
FLASHBOX_WALK_HD uint32_t ext_mod_bits(uint32_t w0, uint32_t w1, uint32_t w2, uint32_t w3, int lane) {
  return ext_mod_byte(w0, lane) | ext_mod_byte(w1, lane) << 8 | ext_mod_byte(w2, lane) << 16 |
         ext_mod_byte(w3, lane) << 24;
}

// The bit tile a block walk's rule tile reads with a mask mod (null: no mod, the range walk, or not a
// rule tile): the tile of partial entry it / tiles_per_block of the walk's row (partial entries come
// first) of the query block from row r_first (the tile's first row; b, h the batch entry and query
// head), moved to `row` (a thread's first row, a position of the sequence) and the tile's first key
// ((it % tiles_per_block) * bn within the mask block).
FLASHBOX_WALK_HD const uint32_t *ext_mod_row(const cuda::DeviceMaskExt &x, const ExtWalk &w, int it, int kind, int b,
                                             int h, int r_first, int row, int bn) {
  if (x.mod_bits == nullptr || w.tiles_per_block == 0 || kind != kTileRule) return nullptr;
  const int qb = r_first / x.q_block;
  return cuda::mod_tile(x, b, h, qb, it / w.tiles_per_block, row - qb * x.q_block, (it % w.tiles_per_block) * bn);
}

// The column bits (ext_doc_bit's order) of a thread's two rows, `row` (m0) and row + 8 (m1), from
// ext_mod_row's pointer (`words` words a tile row: kv_block / 32) over 128 keys: two 16-byte loads
// on the device (the pointer is 16-byte aligned: kv_block and the key origin are multiples of 128).
FLASHBOX_WALK_HD void ext_mod_rows(const uint32_t *mod, int words, int lane, uint32_t &m0, uint32_t &m1) {
  const uint32_t *row1 = mod + 8 * words;
#if defined(__CUDA_ARCH__)
  const uint4 a = __ldg(reinterpret_cast<const uint4 *>(mod)), c = __ldg(reinterpret_cast<const uint4 *>(row1));
#else  // the same words, for the CPU tests (tests/api/mask_walk_test.cpp)
  struct Words {
    uint32_t x, y, z, w;
  };
  const Words a{mod[0], mod[1], mod[2], mod[3]}, c{row1[0], row1[1], row1[2], row1[3]};
#endif
  m0 = ext_mod_bits(a.x, a.y, a.z, a.w, lane);
  m1 = ext_mod_bits(c.x, c.y, c.z, c.w, lane);
}

}  // namespace flashbox::sm90

#undef FLASHBOX_WALK_HD
