// The CUDA kernels' form of the mask families (src/cuda/common/mask_ext.cuh, host and device) against
// their one definition, core::visible (src/core/masks.hpp), on the CPU: the element rule of a
// partial block, the row and key bounds the sm80 kernels walk (every visible pair inside them), the
// seqused and prefix clamping, and the block-mask lookups (block_kind, block_row / block_entry) on
// FlexAttention-layout lists, well-formed and malformed (counts over the row or negative, indices out
// of range: clamped or skipped, never read past the row), and a mask mod's bit tiles read at the
// entry the lookups give. Random cases from the printed seed
// (FLASHBOX_TEST_SEED=N repeats one).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/masks.hpp"
#include "cuda/common/mask_ext.cuh"
#include "support/attention_case.hpp"

namespace {

namespace core = flashbox::core;
using flashbox::cuda::BlockRow;
using flashbox::cuda::DeviceMaskExt;

struct Window {
  int window_left = -1, window_right = -1;
};

TEST(MaskExtRules, ElementRuleAndBoundsMatchCoreVisible) {
  const uint64_t seed = flashbox::test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (FLASHBOX_TEST_SEED=" + std::to_string(seed) + ")");
  std::mt19937_64 rng(seed);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int trial = 0; trial < 2000; ++trial) {
    const int sq = uni(1, 40), sk = uni(1, 40), shift = sk - sq;
    Window w;
    w.window_left = trial % 3 ? -1 : uni(0, 20);
    w.window_right = trial % 2 ? 0 : uni(-1, 20);
    DeviceMaskExt x;
    x.chunk = trial % 4 ? 0 : uni(1, 16);
    std::vector<int32_t> dq(static_cast<size_t>(sq)), dk(static_cast<size_t>(sk));
    for (int32_t &d : dq) d = uni(0, 3);
    for (int32_t &d : dk) d = uni(0, 3);
    const bool docs = trial % 5 < 2, with_prefix = trial % 7 < 3;
    const int32_t prefix_len = int32_t(uni(0, sk));
    if (docs) x.doc_q = dq.data(), x.doc_k = dk.data();
    if (with_prefix) x.prefix = &prefix_len;

    core::ScoreMods m;
    m.window_left = w.window_left, m.window_right = w.window_right, m.chunk = x.chunk;
    if (docs) m.doc_q = dq.data(), m.doc_k = dk.data();
    if (with_prefix) m.prefix = &prefix_len;
    const int prefix = flashbox::cuda::ext_prefix(x, 0, sk);
    ASSERT_EQ(prefix, with_prefix ? prefix_len : 0);
    for (int i = 0; i < sq; ++i)
      for (int j = 0; j < sk; ++j) {
        const bool want = core::visible(m, 0, 0, i, j, sq, sk);
        ASSERT_EQ(flashbox::cuda::ext_visible(w, x, x.doc_q, x.doc_k, prefix, i, j, shift, sq, sk), want)
            << "trial " << trial << " i " << i << " j " << j;
        // The bounds the kernels walk hold every pair the window and chunk admit.
        core::ScoreMods range = m;
        range.doc_q = range.doc_k = nullptr, range.prefix = nullptr;
        if (core::visible(range, 0, 0, i, j, sq, sk)) {
          ASSERT_GE(j, flashbox::cuda::ext_key_begin(w, x, i, shift, sk));
          ASSERT_LT(j, flashbox::cuda::ext_key_end(w, x, i, shift, sk));
          ASSERT_GE(i, flashbox::cuda::ext_query_begin(w, x, j, shift, sq));
          ASSERT_LT(i, flashbox::cuda::ext_query_end(w, x, j, shift, sq));
        }
      }
    // The bounds never decrease (the kernels take the first row's begin and the last row's end).
    for (int i = 1; i < sq; ++i) {
      ASSERT_LE(flashbox::cuda::ext_key_begin(w, x, i - 1, shift, sk),
                flashbox::cuda::ext_key_begin(w, x, i, shift, sk));
      ASSERT_LE(flashbox::cuda::ext_key_end(w, x, i - 1, shift, sk), flashbox::cuda::ext_key_end(w, x, i, shift, sk));
    }
    for (int j = 1; j < sk; ++j) {
      ASSERT_LE(flashbox::cuda::ext_query_begin(w, x, j - 1, shift, sq),
                flashbox::cuda::ext_query_begin(w, x, j, shift, sq));
      ASSERT_LE(flashbox::cuda::ext_query_end(w, x, j - 1, shift, sq),
                flashbox::cuda::ext_query_end(w, x, j, shift, sq));
    }
  }
}

TEST(MaskExtRules, UsedLengthsAndPrefixAreClamped) {
  DeviceMaskExt x;
  const int32_t used_q[3] = {-4, 7, 900}, used_k[3] = {5, -1, 1 << 30}, prefix[3] = {-3, 4, 1000};
  x.seqused_q = used_q, x.seqused_k = used_k, x.prefix = prefix;
  const int want_q[3] = {0, 7, 50}, want_k[3] = {5, 0, 60}, want_p[3] = {0, 4, 60};
  for (int b = 0; b < 3; ++b) {
    int sq = 50, sk = 60;
    flashbox::cuda::ext_used_lengths(x, b, sq, sk);
    EXPECT_EQ(sq, want_q[b]) << b;
    EXPECT_EQ(sk, want_k[b]) << b;
    EXPECT_EQ(flashbox::cuda::ext_prefix(x, b, 60), want_p[b]) << b;
  }
  EXPECT_TRUE(x.any() && x.elementwise() && !x.blocks());
}

// FlexAttention-layout lists of dense kinds [bh][nq][nk], `pad` garbage entries per row.
struct Lists {
  std::vector<int32_t> kv_num, kv_idx, full_num, full_idx;
  int width = 0;
};
Lists encode(const std::vector<uint8_t> &kinds, int bh, int nq, int nk, int pad, std::mt19937_64 &rng) {
  Lists l;
  l.width = nk + pad;
  l.kv_num.assign(size_t(bh * nq), 0), l.full_num.assign(size_t(bh * nq), 0);
  l.kv_idx.assign(size_t(bh * nq * l.width), 777), l.full_idx.assign(size_t(bh * nq * l.width), -777);
  for (int x = 0; x < bh; ++x)
    for (int r = 0; r < nq; ++r) {
      std::vector<int32_t> part, full;
      for (int c = 0; c < nk; ++c) {
        const uint8_t k = kinds[size_t((x * nq + r) * nk + c)];
        if (k == core::kBlockPartial) part.push_back(c);
        if (k == core::kBlockFull) full.push_back(c);
      }
      std::shuffle(part.begin(), part.end(), rng), std::shuffle(full.begin(), full.end(), rng);
      const size_t row = size_t(x * nq + r);
      l.kv_num[row] = int32_t(part.size()), l.full_num[row] = int32_t(full.size());
      std::copy(part.begin(), part.end(), l.kv_idx.begin() + row * l.width);
      std::copy(full.begin(), full.end(), l.full_idx.begin() + row * l.width);
    }
  return l;
}

DeviceMaskExt block_ext(const Lists &l, int batches, int heads, int nq, int nk) {
  DeviceMaskExt x;
  x.kv_num = l.kv_num.data(), x.kv_idx = l.kv_idx.data(), x.full_num = l.full_num.data(),
  x.full_idx = l.full_idx.data();
  x.bm_batch = batches, x.bm_heads = heads, x.q_block = 128, x.kv_block = 128;
  x.max_kv = l.width, x.num_q_blocks = nq, x.num_kv_blocks = nk;
  return x;
}

TEST(MaskExtRules, BlockListsGiveTheDenseKinds) {
  const uint64_t seed = flashbox::test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (FLASHBOX_TEST_SEED=" + std::to_string(seed) + ")");
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 50; ++trial) {
    const int batches = 1 + trial % 2, heads = 1 + trial % 3, nq = 1 + trial % 7, nk = 1 + (trial * 5) % 9;
    std::vector<uint8_t> kinds(size_t(batches * heads * nq * nk));
    std::uniform_int_distribution<int> pick(0, 2);
    for (uint8_t &k : kinds) k = uint8_t(pick(rng));
    const Lists l = encode(kinds, batches * heads, nq, nk, 2, rng);
    const DeviceMaskExt x = block_ext(l, batches, heads, nq, nk);
    // A table of one batch entry or head serves every one (broadcast).
    for (int b = 0; b < (batches == 1 ? 2 : batches); ++b)
      for (int h = 0; h < (heads == 1 ? 3 : heads); ++h)
        for (int qb = 0; qb < nq; ++qb) {
          const int bb = batches == 1 ? 0 : b, hh = heads == 1 ? 0 : h;
          const BlockRow row = flashbox::cuda::block_row(x, b, h, qb);
          std::vector<int> seen(size_t(nk), 0);
          for (int e = 0; e < row.partial + row.full; ++e) {
            bool full = false;
            const int c = flashbox::cuda::block_entry(x, row, e, &full);
            ASSERT_GE(c, 0);
            ASSERT_EQ(kinds[size_t(((bb * heads + hh) * nq + qb) * nk + c)],
                      full ? core::kBlockFull : core::kBlockPartial);
            ++seen[size_t(c)];
          }
          for (int kb = 0; kb < nk; ++kb) {
            const uint8_t want = kinds[size_t(((bb * heads + hh) * nq + qb) * nk + kb)];
            ASSERT_EQ(seen[size_t(kb)], want == core::kBlockSkipped ? 0 : 1);
            ASSERT_EQ(flashbox::cuda::block_kind(x, b, h, qb, kb), int(want)) << trial;
          }
        }
  }
}

// A mask mod's bit tiles as the mod's kernels lay them out (src/jit/mod_source.cpp: tile rows of
// the mod's broadcast in (b, h, q block) order, each row's partial entries packed in list order,
// q_block x kv_block bits row-major) read back through mod_tile / mod_bit at the entry block_kind
// finds: the bit of every (i, j) of every partial block is the mod's, for every batch entry and
// head, whichever of the lists and the mod broadcast.
TEST(MaskExtRules, ModBitTilesFollowTheListOrder) {
  const uint64_t seed = flashbox::test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (FLASHBOX_TEST_SEED=" + std::to_string(seed) + ")");
  std::mt19937_64 rng(seed);
  const int kBlock = 128, kWords = kBlock * kBlock / 32;
  auto mod = [](int b, int h, int i, int j) { return (i * 7 + j * 3 + b * 5 + h) % 4 != 0; };
  for (int trial = 0; trial < 12; ++trial) {
    const int batch = 2, heads = 3, nq = 1 + trial % 3, nk = 1 + trial % 4;
    const int lb = trial % 2 ? 1 : batch, lh = trial % 3 ? heads : 1;  // the lists' broadcast
    const int tb = lb == 1 && trial % 4 < 2 ? 1 : batch, th = lh == 1 && trial % 5 < 3 ? 1 : heads;  // the mod's
    std::vector<uint8_t> kinds(size_t(lb * lh * nq * nk));
    std::uniform_int_distribution<int> pick(0, 2);
    for (uint8_t &k : kinds) k = uint8_t(pick(rng));
    const Lists l = encode(kinds, lb * lh, nq, nk, 1, rng);
    DeviceMaskExt x = block_ext(l, lb, lh, nq, nk);
    std::vector<int64_t> base(size_t(tb * th * nq + 1), 0);
    std::vector<uint32_t> bits;
    for (int b = 0; b < tb; ++b)
      for (int h = 0; h < th; ++h)
        for (int qb = 0; qb < nq; ++qb) {
          const BlockRow row = flashbox::cuda::block_row(x, b, h, qb);
          const size_t r = size_t((b * th + h) * nq + qb);
          base[r + 1] = base[r] + row.partial;
          for (int e = 0; e < row.partial; ++e) {
            bool full = false;
            const int c = flashbox::cuda::block_entry(x, row, e, &full);
            for (int w = 0; w < kWords; ++w) {
              uint32_t word = 0;
              for (int k = 0; k < 32; ++k)
                if (mod(b, h, qb * kBlock + w / 4, c * kBlock + (w % 4) * 32 + k)) word |= 1u << k;
              bits.push_back(word);
            }
          }
        }
    x.mod_bits = bits.data(), x.mod_tile_base = base.data(), x.mod_batch = tb, x.mod_heads = th;
    std::uniform_int_distribution<int> in_block(0, kBlock - 1);
    for (int b = 0; b < batch; ++b)
      for (int h = 0; h < heads; ++h)
        for (int qb = 0; qb < nq; ++qb)
          for (int kb = 0; kb < nk; ++kb) {
            int entry = -1;
            const int kind = flashbox::cuda::block_kind(x, b, h, qb, kb, &entry);
            if (kind != core::kBlockPartial) {
              ASSERT_EQ(entry, -1);
              continue;
            }
            const uint32_t *tile = flashbox::cuda::mod_tile(x, b, h, qb, entry);
            // The same tile moved to an origin inside the block, as the kernels move it.
            const int r0 = in_block(rng), c0 = in_block(rng) / 32 * 32;
            const uint32_t *moved = flashbox::cuda::mod_tile(x, b, h, qb, entry, r0, c0);
            for (int n = 0; n < 64; ++n) {
              const int r = in_block(rng), c = in_block(rng), i = qb * kBlock + r, j = kb * kBlock + c;
              const bool want = mod(tb == 1 ? 0 : b, th == 1 ? 0 : h, i, j);
              if (r >= r0 && c >= c0) ASSERT_EQ(flashbox::cuda::mod_bit_from(x, moved, r - r0, c - c0), want);
              ASSERT_EQ(flashbox::cuda::mod_bit_from(x, tile, r, c), want);
              ASSERT_EQ(flashbox::cuda::mod_bit(x, tile, i, j), want)
                  << "trial " << trial << " b " << b << " h " << h << " (" << i << ", " << j << ")";
            }
          }
  }
  DeviceMaskExt none;
  EXPECT_EQ(flashbox::cuda::mod_tile(none, 0, 0, 0, 0), nullptr);
  EXPECT_TRUE(flashbox::cuda::mod_bit(none, nullptr, 3, 5));  // no mod: the bit admits
}

TEST(MaskExtRules, MalformedListsAreClampedAndSkipped) {
  std::mt19937_64 rng(7);
  const int nq = 3, nk = 4;
  std::vector<uint8_t> kinds(size_t(nq * nk), core::kBlockPartial);
  Lists l = encode(kinds, 1, nq, nk, 1, rng);
  l.kv_num[0] = 1 << 30;  // over the row: clamped to min(width, nk) = 4
  l.kv_num[1] = -5;       // negative: 0
  l.kv_idx[0] = -1;       // out of range both ways: skipped
  l.kv_idx[1] = nk;
  l.full_num[2] = 2, l.full_idx[size_t(2 * l.width)] = 1 << 29, l.full_idx[size_t(2 * l.width + 1)] = 2;
  const DeviceMaskExt x = block_ext(l, 1, 1, nq, nk);
  const BlockRow r0 = flashbox::cuda::block_row(x, 0, 0, 0);
  EXPECT_EQ(r0.partial, nk);
  bool full = true;
  EXPECT_EQ(flashbox::cuda::block_entry(x, r0, 0, &full), -1);
  EXPECT_FALSE(full);
  EXPECT_EQ(flashbox::cuda::block_entry(x, r0, 1, &full), -1);
  EXPECT_EQ(flashbox::cuda::block_row(x, 0, 0, 1).partial, 0);
  const BlockRow r2 = flashbox::cuda::block_row(x, 0, 0, 2);
  EXPECT_EQ(r2.full, 2);
  EXPECT_EQ(flashbox::cuda::block_entry(x, r2, r2.partial, &full), -1);
  EXPECT_TRUE(full);
  EXPECT_EQ(flashbox::cuda::block_entry(x, r2, r2.partial + 1, &full), 2);
  EXPECT_EQ(flashbox::cuda::block_kind(x, 0, 0, 2, 2), core::kBlockFull);  // listed in both: full
  EXPECT_EQ(flashbox::cuda::block_kind(x, 0, 0, 1, 0), core::kBlockSkipped);
  EXPECT_EQ(flashbox::cuda::block_kind(x, 0, 0, nq, 0), core::kBlockSkipped);  // a row past the table
}

}  // namespace
