// The sm90 forward's walk with the mask families (src/cuda/forward/sm90/mask_walk.cuh, host and
// device) against core::visible on the CPU. For random problems (windows, causal, chunks, prefixes,
// sorted and scattered document ids, block masks of 128 and 256 blocks with partial and full
// entries, malformed lists) this emulates what the kernel does per 128-row query block: the walk's
// tiles (ext_walk / ext_walk_tile, the doc span computed as flash_fwd_sm90_doc_spans.cu computes it),
// each warp's need for a tile (the largest over its 16 rows of ext_tile_need, documents matched as
// the kernel's vote matches them) and the mask that need applies. Every visible (row, key) pair must
// be admitted exactly once, and no other pair (keys past sk included) ever. Seed printed;
// FLASHBOX_TEST_SEED=N repeats one. A mask mod's bit-tile words turned into the same column bits as
// the documents (ext_mod_byte) are checked column by column, and the consumers' own gather of a
// mod's bits (ext_mod_row, ext_mod_rows) for every score of every thread: in the walks above (half of
// the block-mask problems carry a mod) and over batch entries, heads and broadcasts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/masks.hpp"
#include "cuda/forward/sm90/mask_walk.cuh"
#include "support/attention_case.hpp"

namespace {

namespace core = flashbox::core;
namespace cu = flashbox::cuda;
namespace sm90 = flashbox::sm90;

constexpr int kBM = 128, kBN = 128;

struct WalkWindow {
  int window_left = -1, window_right = -1;
};

// FlexAttention-layout lists of one (batch, head) row set from dense kinds [nq][nk].
struct WalkLists {
  std::vector<int32_t> kv_num, kv_idx, full_num, full_idx;
  int width = 0;
};
WalkLists encode(const std::vector<uint8_t> &kinds, int nq, int nk, std::mt19937_64 &rng) {
  WalkLists l;
  l.width = nk + 1;
  l.kv_num.assign(size_t(nq), 0), l.full_num.assign(size_t(nq), 0);
  l.kv_idx.assign(size_t(nq * l.width), 555), l.full_idx.assign(size_t(nq * l.width), -555);
  for (int r = 0; r < nq; ++r) {
    std::vector<int32_t> part, full;
    for (int c = 0; c < nk; ++c) {
      const uint8_t k = kinds[size_t(r * nk + c)];
      if (k == core::kBlockPartial) part.push_back(c);
      if (k == core::kBlockFull) full.push_back(c);
    }
    std::shuffle(part.begin(), part.end(), rng), std::shuffle(full.begin(), full.end(), rng);
    l.kv_num[size_t(r)] = int32_t(part.size()), l.full_num[size_t(r)] = int32_t(full.size());
    std::copy(part.begin(), part.end(), l.kv_idx.begin() + r * l.width);
    std::copy(full.begin(), full.end(), l.full_idx.begin() + r * l.width);
  }
  return l;
}

// One random problem: its mask fields as the kernel (DeviceMaskExt) and core::visible take them.
struct Problem {
  int sq = 1, sk = 1, prefix_len = 0, q_block = 128, kv_block = 128;
  WalkWindow w;
  std::vector<int32_t> dq, dk;
  std::vector<uint8_t> kinds;  // dense block kinds [nq][nk]; empty: no block mask
  WalkLists lists;
  // A mask mod (block masks only): its bit tiles per partial entry, written from mod_value.
  std::vector<uint32_t> mod_bits;
  std::vector<int64_t> mod_base;
  cu::DeviceMaskExt x;
  core::ScoreMods m;  // without the block mask (kinds hold it)
};

std::vector<int32_t> ids(std::mt19937_64 &rng, int n, int docs, bool scattered) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::vector<int> cuts;
  for (int d = 1; d < docs; ++d) cuts.push_back(std::uniform_int_distribution<int>(0, n)(rng));
  std::sort(cuts.begin(), cuts.end());
  for (int i = 0; i < n; ++i)
    v[size_t(i)] = scattered ? std::uniform_int_distribution<int>(0, docs - 1)(rng)
                             : int32_t(std::upper_bound(cuts.begin(), cuts.end(), i) - cuts.begin());
  return v;
}

// A mask mod's value for (batch entry b, query head h, row i, key j): structure inside a block that
// no block-level rule reproduces (a hash), admitting every element of some blocks (so that a tile
// whose mod admits all of a warp's keys needs no element rule) and, past the lengths, anything.
bool mod_value(int b, int h, int i, int j) {
  auto mix = [](uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
  };
  if (mix(uint64_t(b) * 1000003u + uint64_t(h) * 7919u + uint64_t(i / 128) * 131u + uint64_t(j / 128)) % 3 == 0)
    return true;
  return mix((uint64_t(b) << 48) ^ (uint64_t(h) << 40) ^ (uint64_t(uint32_t(i)) << 20) ^ uint64_t(uint32_t(j))) % 4 != 0;
}

// The mod's bit tiles of a block mask (the layout of cuda::DeviceMaskExt::mod_bits, as
// src/api/mask_mod_tiles.hpp writes them): tile row (mb, mh, qb) holds one tile per partial entry of
// block row (mb or 0, mh or 0, qb) of the lists, in list order; mod_batch / mod_heads 1: the value
// of batch entry / head 0 for all. Sets x's mod fields.
void attach_mod(cu::DeviceMaskExt &x, std::vector<uint32_t> &bits, std::vector<int64_t> &base, int mod_batch,
                int mod_heads) {
  const int words = x.kv_block / 32;
  const int64_t tile_words = int64_t(x.q_block) * words;
  base.clear(), bits.clear();
  for (int mb = 0; mb < mod_batch; ++mb)
    for (int mh = 0; mh < mod_heads; ++mh)
      for (int qb = 0; qb < x.num_q_blocks; ++qb) {
        base.push_back(int64_t(bits.size()) / tile_words);
        const cu::BlockRow r = cu::block_row(x, mb, mh, qb);
        for (int e = 0; e < r.partial; ++e) {
          const int c = x.kv_idx[r.base + e];
          const size_t at = bits.size();
          bits.resize(at + size_t(tile_words), 0u);
          if (c < 0 || c >= x.num_kv_blocks) continue;  // a malformed entry's tile: never read
          for (int rr = 0; rr < x.q_block; ++rr)
            for (int cc = 0; cc < x.kv_block; ++cc)
              if (mod_value(mb, mh, qb * x.q_block + rr, c * x.kv_block + cc))
                bits[at + size_t(rr * words + cc / 32)] |= 1u << (cc % 32);
        }
      }
  base.push_back(int64_t(bits.size()) / tile_words);
  x.mod_bits = bits.data(), x.mod_tile_base = base.data();
  x.mod_batch = mod_batch, x.mod_heads = mod_heads;
}

void make(Problem &p, std::mt19937_64 &rng, int trial) {
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const int lengths[] = {1, 17, 63, 64, 65, 127, 128, 129, 300, 513};
  p.sq = lengths[uni(0, 9)], p.sk = trial % 3 ? p.sq : lengths[uni(0, 9)];
  if (trial % 4 == 0) p.w.window_right = 0;  // causal
  if (trial % 5 == 0) p.w.window_left = uni(0, 200), p.w.window_right = uni(-1, 50);
  p.x.chunk = trial % 6 == 1 ? uni(1, 160) : 0;
  const int family = trial % 4;  // 0 documents, 1 prefix, 2 documents and prefix, 3 block mask
  if (family == 0 || family == 2) {
    const bool scattered = trial % 7 == 0;
    const int docs = uni(1, 9);
    p.dq = ids(rng, p.sq, docs, scattered);
    // Keys cut at the same fractions (packed), or their own ids.
    if (trial % 3 == 2) {
      p.dk = ids(rng, p.sk, docs, scattered);
    } else {
      p.dk.resize(size_t(p.sk));
      for (int j = 0; j < p.sk; ++j) p.dk[size_t(j)] = p.dq[size_t(int64_t(j) * p.sq / p.sk)];
    }
    p.x.doc_q = p.dq.data(), p.x.doc_k = p.dk.data();
    p.m.doc_q = p.dq.data(), p.m.doc_k = p.dk.data();
  }
  if (family == 1 || family == 2) {
    p.prefix_len = uni(0, p.sk);
    p.x.prefix = &p.prefix_len, p.m.prefix = &p.prefix_len;
  }
  if (family == 3) {
    p.q_block = trial % 8 == 3 ? 256 : 128, p.kv_block = trial % 16 == 7 ? 256 : 128;
    const int nq = (p.sq + p.q_block - 1) / p.q_block, nk = (p.sk + p.kv_block - 1) / p.kv_block;
    p.kinds.resize(size_t(nq * nk));
    for (uint8_t &k : p.kinds) k = uint8_t(uni(0, 2));
    p.lists = encode(p.kinds, nq, nk, rng);
    p.x.kv_num = p.lists.kv_num.data(), p.x.kv_idx = p.lists.kv_idx.data();
    p.x.full_num = p.lists.full_num.data(), p.x.full_idx = p.lists.full_idx.data();
    p.x.q_block = p.q_block, p.x.kv_block = p.kv_block;
    p.x.max_kv = p.lists.width, p.x.num_q_blocks = nq, p.x.num_kv_blocks = nk;
    if (trial % 2 == 1) attach_mod(p.x, p.mod_bits, p.mod_base, 1, 1);
  }
  p.m.window_left = p.w.window_left, p.m.window_right = p.w.window_right, p.m.chunk = p.x.chunk;
}

bool want_visible(const Problem &p, int i, int j) {
  if (!p.kinds.empty()) {
    const int nk = (p.sk + p.kv_block - 1) / p.kv_block;
    const uint8_t k = p.kinds[size_t((i / p.q_block) * nk + j / p.kv_block)];
    if (k == core::kBlockFull) return true;
    if (k == core::kBlockSkipped) return false;
    if (p.x.mod_bits && !mod_value(0, 0, i, j)) return false;
  }
  return core::visible(p.m, 0, 0, i, j, p.sq, p.sk);
}

// The column bits a warp of the kernel holds for a rule tile with a mask mod, as the consumers gather
// them (ext_mod_row, ext_mod_rows: the kernel's own functions), laid out by the wgmma accumulator
// layout: lane 4 g + q holds rows wr + g and wr + g + 8, score i of them column 8 (i / 4) + 2 q + i % 2
// (cuda/hopper/fragment.cuh), at bit ext_doc_bit(i). grid[r][c]: row wr + r, key k0 + c; each set
// exactly once (checked). Null mod (not a rule tile of a block walk): every bit 1.
void mod_grid(const cu::DeviceMaskExt &x, const sm90::ExtWalk &w, int it, int kind, int b, int h, int r_first,
              int wr, std::vector<std::vector<int>> &grid) {
  grid.assign(16, std::vector<int>(size_t(kBN), -1));
  for (int lane = 0; lane < 32; ++lane) {
    const int row0 = wr + lane / 4;
    const uint32_t *mod = sm90::ext_mod_row(x, w, it, kind, b, h, r_first, row0, kBN);
    uint32_t m[2] = {~0u, ~0u};
    if (mod != nullptr) sm90::ext_mod_rows(mod, x.kv_block / 32, lane, m[0], m[1]);
    for (int i = 0; i < kBN / 2; ++i) {
      const int half = (i >> 1) & 1, col = 8 * (i >> 2) + 2 * (lane % 4) + (i & 1);
      int &cell = grid[size_t(lane / 4 + 8 * half)][size_t(col)];
      ASSERT_EQ(cell, -1) << "lane " << lane << " score " << i << ": a cell set twice";
      cell = int((m[half] >> sm90::ext_doc_bit(i)) & 1u);
    }
  }
}

// The doc span of rows [r0, r1) over keys [0, sk) (cuda/common/mask_ext.cuh doc_span's rule).
void doc_span(const Problem &p, int r0, int r1, int *begin, int *end) {
  int lo = INT32_MAX, hi = INT32_MIN, first = INT32_MAX, last = -1;
  for (int r = r0; r < r1; ++r) lo = std::min(lo, p.dq[size_t(r)]), hi = std::max(hi, p.dq[size_t(r)]);
  for (int j = 0; j < p.sk; ++j)
    if (p.dk[size_t(j)] >= lo && p.dk[size_t(j)] <= hi) first = std::min(first, j), last = std::max(last, j);
  *begin = last < 0 ? 0 : first, *end = last < 0 ? 0 : last + 1;
}

// The kernel's treatment of every pair of query block mb: admitted[r][j] counts the times row
// mb * BM + r admits key j of the walk's tiles (j up to the last tile's end).
void run_block(const Problem &p, int mb, std::vector<std::vector<int>> &admitted) {
  const int shift = p.sk - p.sq, r0 = mb * kBM, r1 = std::min(r0 + kBM, p.sq);
  int span_begin = 0, span_end = p.sk;
  if (p.x.doc_q) doc_span(p, r0, r1, &span_begin, &span_end);
  const sm90::ExtWalk walk = sm90::ext_walk(p.w, p.x, 0, 0, mb, kBM, kBN, p.sq, p.sk, span_begin, span_end);
  const int prefix = cu::ext_prefix(p.x, 0, p.sk);
  std::vector<std::vector<int>> grid;
  for (int it = 0; it < walk.count; ++it) {
    int kind = -1;
    const int n = sm90::ext_walk_tile(p.x, walk, it, kBN, p.sk, &kind);
    ASSERT_GE(n, 0);
    ASSERT_TRUE(kind == sm90::kTileDead || n * kBN < p.sk) << "a live tile past the keys";
    const int k0 = n * kBN;
    for (int warp = 0; warp < kBM / 16; ++warp) {
      // The warp's rows; rows past sq read the last row's id (their results are never stored).
      const int wr = r0 + 16 * warp;
      int need = sm90::kNeedNone;
      if (kind == sm90::kTileDead) {
        need = sm90::kNeedAll;
      } else if (kind == sm90::kTileFull) {
        need = k0 + kBN > p.sk ? sm90::kNeedEnd : sm90::kNeedNone;
      } else {
        bool docs_match = true;
        // A mask mod's bits (the consumers' gather); the kernel's vote: every bit of the warp's rows 1.
        mod_grid(p.x, walk, it, kind, 0, 0, r0, wr, grid);
        if (::testing::Test::HasFatalFailure()) return;
        for (const std::vector<int> &row : grid)
          for (int bit : row) docs_match = docs_match && bit == 1;
        if (p.x.doc_q) {
          const int32_t d = p.dq[size_t(std::min(wr, p.sq - 1))];
          for (int r = wr; r < wr + 16; ++r) docs_match = docs_match && p.dq[size_t(std::min(r, p.sq - 1))] == d;
          for (int j = k0; j < k0 + kBN && j < p.sk; ++j) docs_match = docs_match && p.dk[size_t(j)] == d;
        }
        for (int r = wr; r < wr + 16; ++r)
          need = std::max(need, sm90::ext_tile_need(k0, kBN, cu::ext_key_begin(p.w, p.x, r, shift, p.sk),
                                                    cu::ext_key_end(p.w, p.x, r, shift, p.sk), prefix, docs_match));
      }
      for (int r = wr; r < std::min(wr + 16, p.sq); ++r) {
        const int begin = cu::ext_key_begin(p.w, p.x, r, shift, p.sk), end = cu::ext_key_end(p.w, p.x, r, shift, p.sk);
        for (int j = k0; j < k0 + kBN; ++j) {
          bool seen = true;
          switch (need) {
            case sm90::kNeedAll: seen = false; break;
            case sm90::kNeedEnd: seen = j < p.sk; break;
            case sm90::kNeedBounds: seen = j >= begin && j < end; break;
            case sm90::kNeedElement:
              seen = sm90::ext_key_visible(j, p.sk, p.x.doc_q ? p.dk.data() : nullptr, p.x.doc_q ? p.dq[size_t(r)] : 0,
                                           prefix, begin, end) &&
                     (kind != sm90::kTileRule || grid[size_t(r - wr)][size_t(j - k0)] == 1);
              break;
            default: break;
          }
          if (seen) {
            ASSERT_LT(j, p.sk) << "row " << r << " admits key " << j << " past the keys (need " << need << ")";
            ++admitted[size_t(r - r0)][size_t(j)];
          }
        }
      }
    }
  }
}

TEST(MaskWalkSm90, EveryVisiblePairExactlyOnce) {
  const uint64_t seed = flashbox::test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (FLASHBOX_TEST_SEED=" + std::to_string(seed) + ")");
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 600; ++trial) {
    Problem p;
    make(p, rng, trial);
    SCOPED_TRACE("trial " + std::to_string(trial) + " sq " + std::to_string(p.sq) + " sk " + std::to_string(p.sk));
    for (int mb = 0; mb * kBM < p.sq; ++mb) {
      std::vector<std::vector<int>> admitted(size_t(kBM), std::vector<int>(size_t(p.sk), 0));
      run_block(p, mb, admitted);
      if (HasFatalFailure()) return;
      for (int r = mb * kBM; r < std::min(mb * kBM + kBM, p.sq); ++r)
        for (int j = 0; j < p.sk; ++j)
          ASSERT_EQ(admitted[size_t(r - mb * kBM)][size_t(j)], want_visible(p, r, j) ? 1 : 0)
              << "row " << r << " key " << j;
    }
  }
}

TEST(MaskWalkSm90, EmptyWalks) {
  cu::DeviceMaskExt x;
  const WalkWindow causal{-1, 0};
  // Rows past the used ones, and no key at all: nothing walked.
  EXPECT_EQ(sm90::ext_walk(causal, x, 0, 0, 1, kBM, kBN, 128, 500, 0, 500).count, 0);
  EXPECT_EQ(sm90::ext_walk(causal, x, 0, 0, 0, kBM, kBN, 100, 0, 0, 0).count, 0);
  // Documents whose span is empty: nothing walked.
  const int32_t dq[2] = {1, 1}, dk[2] = {2, 2};
  x.doc_q = dq, x.doc_k = dk;
  EXPECT_EQ(sm90::ext_walk(WalkWindow{}, x, 0, 0, 0, kBM, kBN, 2, 2, 0, 0).count, 0);
  // A causal range: tiles from the diagonal's down to 0.
  cu::DeviceMaskExt plain;
  const sm90::ExtWalk w = sm90::ext_walk(causal, plain, 0, 0, 2, kBM, kBN, 512, 512, 0, 512);
  ASSERT_EQ(w.count, 3);
  int kind = -1;
  EXPECT_EQ(sm90::ext_walk_tile(plain, w, 0, kBN, 512, &kind), 2);
  EXPECT_EQ(kind, sm90::kTileRule);
  EXPECT_EQ(sm90::ext_walk_tile(plain, w, 2, kBN, 512, &kind), 0);
}

TEST(MaskWalkSm90, MalformedListsGiveDeadTiles) {
  std::mt19937_64 rng(11);
  const int nq = 2, nk = 3;
  std::vector<uint8_t> kinds(size_t(nq * nk), core::kBlockPartial);
  WalkLists l = encode(kinds, nq, nk, rng);
  l.kv_idx[0] = -1, l.kv_idx[1] = 1 << 29, l.kv_idx[2] = 2;  // out of range both ways, then block 2
  l.kv_num[1] = 1 << 30;                                     // over the row: clamped to min(width, nk)
  cu::DeviceMaskExt x;
  x.kv_num = l.kv_num.data(), x.kv_idx = l.kv_idx.data();
  x.q_block = 128, x.kv_block = 256, x.max_kv = l.width, x.num_q_blocks = nq, x.num_kv_blocks = nk;
  const sm90::ExtWalk w = sm90::ext_walk(WalkWindow{}, x, 0, 0, 0, kBM, kBN, 256, 600, 0, 600);
  ASSERT_EQ(w.tiles_per_block, 2);
  ASSERT_EQ(w.count, nk * 2);
  int kind = -1;
  EXPECT_EQ(sm90::ext_walk_tile(x, w, 0, kBN, 600, &kind), 0);
  EXPECT_EQ(kind, sm90::kTileDead);
  EXPECT_EQ(sm90::ext_walk_tile(x, w, 3, kBN, 600, &kind), 0);
  EXPECT_EQ(kind, sm90::kTileDead);
  // The third entry, block 2: keys 512..767, its second tile (640..) past the 600 keys: dead.
  const int n = sm90::ext_walk_tile(x, w, 4, kBN, 600, &kind);
  EXPECT_EQ(kind, sm90::kTileRule);
  EXPECT_EQ(n, 4);
  EXPECT_EQ(sm90::ext_walk_tile(x, w, 5, kBN, 600, &kind), 0);
  EXPECT_EQ(kind, sm90::kTileDead);
  EXPECT_EQ(sm90::ext_walk(WalkWindow{}, x, 0, 0, 1, kBM, kBN, 256, 600, 0, 600).count, nk * 2);
}

// The element rule's document bits: bit ext_doc_bit(i) of a lane is its score i's column (the wgmma
// accumulator layout: 8 (i / 4) + 2 (lane % 4) + i % 2), and the lane and register that hold that
// key's id (lane L reads keys L + 32 e) are ext_doc_bit_lane / ext_doc_bit_reg; 32 bits per row.
TEST(MaskWalkSm90, DocumentBitsNameTheScoresColumns) {
  for (int lane = 0; lane < 32; ++lane) {
    std::vector<int> seen(32, 0);
    for (int i = 0; i < kBN / 2; ++i) {
      if ((i >> 1) & 1) continue;  // the second row's scores (acc_half 1) share the first's columns
      const int column = 8 * (i >> 2) + 2 * (lane % 4) + (i & 1);
      const int b = sm90::ext_doc_bit(i);
      ASSERT_GE(b, 0);
      ASSERT_LT(b, 32);
      ++seen[size_t(b)];
      const int src = sm90::ext_doc_bit_lane(b, lane), reg = sm90::ext_doc_bit_reg(b);
      ASSERT_GE(src, 0);
      ASSERT_LT(src, 32);
      ASSERT_LT(reg, kBN / 32);
      EXPECT_EQ(src + 32 * reg, column) << "lane " << lane << " score " << i;
    }
    for (int b = 0; b < 32; ++b) EXPECT_EQ(seen[size_t(b)], 1) << "bit " << b;
  }
}

// A mask mod's bits in the documents' order: word w of a bit-tile row (keys 32 w + c at bit c) gives,
// through ext_mod_byte, bits 8 w .. 8 w + 7 of the lane's mask, and bit ext_doc_bit(i) of it must be
// the row's bit of score i's column (every single bit of the row, then random words).
TEST(MaskWalkSm90, ModBitsNameTheScoresColumns) {
  std::mt19937 rng(90);
  for (int round = 0; round < kBN + 64; ++round) {
    uint32_t words[kBN / 32] = {};
    if (round < kBN)
      words[round / 32] = 1u << (round % 32);
    else
      for (uint32_t &w : words) w = uint32_t(rng());
    for (int lane = 0; lane < 32; ++lane) {
      uint32_t mask = 0;
      for (int w = 0; w < kBN / 32; ++w) mask |= sm90::ext_mod_byte(words[w], lane) << (8 * w);
      int ones = 0;
      for (int i = 0; i < kBN / 2; ++i) {
        if ((i >> 1) & 1) continue;  // the second row's scores take the same bits of its own row's words
        const int column = 8 * (i >> 2) + 2 * (lane % 4) + (i & 1);
        const uint32_t want = (words[column / 32] >> (column % 32)) & 1u;
        EXPECT_EQ((mask >> sm90::ext_doc_bit(i)) & 1u, want) << "round " << round << " lane " << lane << " score " << i;
        ones += int(want);
      }
      EXPECT_EQ(__builtin_popcount(mask), ones) << "round " << round << " lane " << lane << ": a bit of another column";
    }
  }
}

// A mask mod's bits for every score of every thread, through the consumers' own gather (ext_mod_row:
// the partial entry it / tiles_per_block, the row inside the mask block, the tile's first key;
// ext_mod_rows: the two rows' words in the accumulator's column order): for block sizes 128..384
// (several 128-key tiles per mask block, several 128-row query blocks per mask row), lengths that
// are not multiples of them (the last tiles' rows and keys past the lengths too: the tiles hold whole
// blocks), per-batch / per-head lists or broadcast ones, and a mod of its own broadcast, each bit
// must be mod_value of the (batch entry, head, row, key) that score holds.
TEST(MaskWalkSm90, ModRowsGiveEveryScoreItsBit) {
  const uint64_t seed = flashbox::test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (FLASHBOX_TEST_SEED=" + std::to_string(seed) + ")");
  std::mt19937_64 rng(seed);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const int batch = 2, heads = 3;
  int checked = 0;
  for (int trial = 0; trial < 24; ++trial) {
    const int q_block = 128 * uni(1, 2), kv_block = 128 * uni(1, 3);
    const int sq = uni(1, 700), sk = uni(1, 900);
    const int nq = (sq + q_block - 1) / q_block, nk = (sk + kv_block - 1) / kv_block;
    const int bm_batch = trial % 2 ? batch : 1, bm_heads = trial % 4 < 2 ? heads : 1;
    // The mod broadcasts only where the lists do (attach_mask_mod: one tile row per list row then).
    const int mod_batch = bm_batch == 1 && trial % 3 == 0 ? 1 : batch;
    const int mod_heads = bm_heads == 1 && trial % 5 < 2 ? 1 : heads;
    SCOPED_TRACE("trial " + std::to_string(trial) + ": blocks " + std::to_string(q_block) + " x " +
                 std::to_string(kv_block) + ", sq " + std::to_string(sq) + " sk " + std::to_string(sk) +
                 ", lists " + std::to_string(bm_batch) + " x " + std::to_string(bm_heads) + ", mod " +
                 std::to_string(mod_batch) + " x " + std::to_string(mod_heads));
    // Lists of every (list batch, list head) row set, one after another (the rows' order of block_row).
    WalkLists all;
    all.width = nk + 1;
    for (int rows = 0; rows < bm_batch * bm_heads; ++rows) {
      std::vector<uint8_t> kinds(size_t(nq * nk));
      for (uint8_t &k : kinds) k = uint8_t(uni(0, 2));
      const WalkLists l = encode(kinds, nq, nk, rng);
      all.kv_num.insert(all.kv_num.end(), l.kv_num.begin(), l.kv_num.end());
      all.kv_idx.insert(all.kv_idx.end(), l.kv_idx.begin(), l.kv_idx.end());
      all.full_num.insert(all.full_num.end(), l.full_num.begin(), l.full_num.end());
      all.full_idx.insert(all.full_idx.end(), l.full_idx.begin(), l.full_idx.end());
    }
    cu::DeviceMaskExt x;
    x.kv_num = all.kv_num.data(), x.kv_idx = all.kv_idx.data();
    x.full_num = all.full_num.data(), x.full_idx = all.full_idx.data();
    x.bm_batch = bm_batch, x.bm_heads = bm_heads, x.q_block = q_block, x.kv_block = kv_block;
    x.max_kv = all.width, x.num_q_blocks = nq, x.num_kv_blocks = nk;
    std::vector<uint32_t> bits;
    std::vector<int64_t> base;
    attach_mod(x, bits, base, mod_batch, mod_heads);
    std::vector<std::vector<int>> grid;
    for (int b = 0; b < batch; ++b)
      for (int h = 0; h < heads; ++h)
        for (int mb = 0; mb * kBM < sq; ++mb) {
          const sm90::ExtWalk w = sm90::ext_walk(WalkWindow{}, x, b, h, mb, kBM, kBN, sq, sk, 0, sk);
          const cu::BlockRow row = cu::block_row(x, b, h, mb * kBM / q_block);
          ASSERT_EQ(w.count, (row.partial + row.full) * (kv_block / kBN));
          for (int it = 0; it < w.count; ++it) {
            int kind = -1;
            const int n = sm90::ext_walk_tile(x, w, it, kBN, sk, &kind);
            for (int warp = 0; warp < kBM / 16; ++warp) {  // both consumer warpgroups' four warps
              const int wr = mb * kBM + 16 * warp;
              if (kind != sm90::kTileRule) {
                EXPECT_EQ(sm90::ext_mod_row(x, w, it, kind, b, h, mb * kBM, wr, kBN), nullptr) << "kind " << kind;
                continue;
              }
              mod_grid(x, w, it, kind, b, h, mb * kBM, wr, grid);
              if (HasFatalFailure()) return;
              for (int r = 0; r < 16; ++r)
                for (int c = 0; c < kBN; ++c) {
                  const int i = wr + r, j = n * kBN + c;
                  // The key's block must be a partial entry of the row's lists (its tile is the one read).
                  int entry = -1;
                  const cu::BlockRow br = cu::block_row(x, b, h, i / q_block);
                  for (int e = 0; e < br.partial && entry < 0; ++e)
                    if (x.kv_idx[br.base + e] == j / kv_block) entry = e;
                  ASSERT_GE(entry, 0) << "row " << i << " key " << j << ": not a partial block of the row";
                  const bool want = mod_value(mod_batch == 1 ? 0 : b, mod_heads == 1 ? 0 : h, i, j);
                  ASSERT_EQ(cu::mod_bit(x, cu::mod_tile(x, b, h, i / q_block, entry), i, j), want) << "the test's tiles";
                  ASSERT_EQ(grid[size_t(r)][size_t(c)], int(want))
                      << "b " << b << " h " << h << " row " << i << " key " << j << " (iteration " << it << ", lane "
                      << 4 * (r % 8) + (c % 8) / 2 << ")";
                  ++checked;
                }
            }
          }
        }
  }
  EXPECT_GT(checked, 1000000);
}

}  // namespace
