// flashbox_attention_ext's mask families (document ids, prefix-LM) and block masks
// (flashbox_block_mask, FlexAttention's BlockMask layout) on the CPU levels (naive and blocked,
// forward and backward, both deterministic modes) against the fp64 reference on fresh random inputs
// (seed printed): each family alone and with causal / windows / chunks, random 50 % block-sparse
// masks of partial and full blocks, block sizes that do not divide T, T = 1, 17, 65, 1000,
// seqlen_q != seqlen_k, GQA, broadcast batch / heads, seqused; rows that see no key (o = 0,
// lse = -inf, zero gradients); a block mask equal to causal gives causal's answer. The sanitizer
// build (support/sanitizer_build.hpp) runs T = 250 for 1000, and the random sparse masks with one
// causal setting per shape and block size.
// Each case draws its documents and blocks from the seed its name prints, so FLASHBOX_TEST_SEED
// reproduces them with the data. The refusals of malformed masks are in
// tests/api/block_mask_args_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "core/masks.hpp"
#include "support/mask_case.hpp"
#include "support/sanitizer_build.hpp"

using flashbox::test::BlockSpec;
using flashbox::test::check_cpu_levels;
using flashbox::test::fresh_seed;
using flashbox::test::MaskCase;
using flashbox::test::MaskData;
namespace core = flashbox::core;

namespace {

// Document ids of `rows` tokens per batch entry: sorted runs of random lengths (packed documents),
// or with `scattered` ids drawn at random per token (any order the definition allows).
std::vector<int32_t> document_ids(std::mt19937_64 &rng, int64_t batch, int64_t rows, int docs, bool scattered) {
  std::vector<int32_t> ids(size_t(batch * rows));
  std::uniform_int_distribution<int> pick(0, docs - 1);
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<int64_t> cuts;
    for (int d = 1; d < docs; ++d) cuts.push_back(std::uniform_int_distribution<int64_t>(0, rows)(rng));
    std::sort(cuts.begin(), cuts.end());
    for (int64_t i = 0; i < rows; ++i)
      ids[size_t(b * rows + i)] =
          scattered ? pick(rng) : int32_t(std::upper_bound(cuts.begin(), cuts.end(), i) - cuts.begin());
  }
  return ids;
}

// Keys and queries of one packed layout: both sides cut at the same fractions of their lengths.
void same_documents(MaskCase &c, std::mt19937_64 &rng, int docs) {
  c.docs_q = document_ids(rng, c.batch, c.seqlen_q, docs, false);
  c.docs_k.resize(size_t(c.batch * c.seqlen_k));
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t j = 0; j < c.seqlen_k; ++j)
      c.docs_k[size_t(b * c.seqlen_k + j)] = c.docs_q[size_t(b * c.seqlen_q + j * c.seqlen_q / c.seqlen_k)];
}

int64_t blocks_of(int64_t n, int64_t size) { return (n + size - 1) / size; }

// A random block mask: each pair skipped with probability `skip`, else full with probability `full`,
// else partial.
BlockSpec random_blocks(std::mt19937_64 &rng, const MaskCase &c, int64_t qb, int64_t kb, int64_t batches, int64_t heads,
                        double skip, double full) {
  BlockSpec s;
  s.q_block = qb, s.kv_block = kb, s.batches = batches, s.heads = heads;
  const int64_t n = batches * heads * blocks_of(c.seqlen_q, qb) * blocks_of(c.seqlen_k, kb);
  std::uniform_real_distribution<double> u(0, 1);
  s.kinds.resize(size_t(n));
  for (uint8_t &k : s.kinds) {
    const double x = u(rng);
    k = x < skip ? core::kBlockSkipped : x < skip + (1 - skip) * full ? core::kBlockFull : core::kBlockPartial;
  }
  return s;
}

// FlexAttention's mask_mods written out for one element (attention-gym's generate_doc_mask_mod and
// prefix_lm; the causal / window / chunk rule of FlashAttention, bottom-right aligned), composed as
// the header says: (prefix or range) and same document, a full block admitting every element, a
// partial one the rest, an unlisted one nothing.
bool flex_visible(const core::ScoreMods &m, const std::vector<uint8_t> &kinds, int64_t qb, int64_t kb, int64_t nk,
                  int64_t i, int64_t j, int64_t sq, int64_t sk) {
  if (!kinds.empty()) {
    const uint8_t k = kinds[size_t((i / qb) * nk + j / kb)];
    if (k == core::kBlockSkipped) return false;
    if (k == core::kBlockFull) return true;
  }
  const int64_t diag = i + sk - sq;
  bool range = !(m.window_right >= 0 && j > diag + m.window_right) && !(m.window_left >= 0 && j < diag - m.window_left);
  if (m.chunk > 0) {
    const int64_t start = int64_t(std::floor(double(diag) / double(m.chunk))) * m.chunk;
    range = range && j >= start && j < start + m.chunk;
  }
  const bool prefix = m.prefix && j < m.prefix[0];
  const bool same_doc = !m.doc_q || m.doc_q[i] == m.doc_k[j];
  return (prefix || range) && same_doc;
}

TEST(MaskFamilies, VisibleMatchesFlexAttentionAndBoundsHoldIt) {
  // core::visible against flex_visible element by element, and the blocked levels' shortcuts:
  // row_keys / key_rows contain every visible element, tile_mask's skip holds none and its all
  // holds every element of the tile.
  const uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  auto uni = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  for (int trial = 0; trial < 1500; ++trial) {
    const int64_t sq = uni(1, 40), sk = uni(1, 40), qb = uni(1, 12), kb = uni(1, 12);
    const int64_t nq = blocks_of(sq, qb), nk = blocks_of(sk, kb);
    core::ScoreMods m;
    m.window_left = trial % 4 ? -1 : uni(0, 20), m.window_right = trial % 2 ? 0 : uni(-1, 20);
    m.chunk = trial % 5 ? 0 : uni(1, 16);
    std::vector<int32_t> dq = document_ids(rng, 1, sq, int(uni(1, 4)), trial % 3 == 0);
    std::vector<int32_t> dk = document_ids(rng, 1, sk, int(uni(1, 4)), trial % 3 == 0);
    const int32_t prefix = int32_t(uni(0, sk));
    if (trial % 2) m.doc_q = dq.data(), m.doc_k = dk.data();
    if (trial % 3 != 1) m.prefix = &prefix;
    std::vector<uint8_t> kinds;
    if (trial % 4 != 3) {
      kinds.resize(size_t(nq * nk));
      for (uint8_t &k : kinds) k = uint8_t(uni(0, 2));
      m.blocks.kind = kinds.data(), m.blocks.q_block = qb, m.blocks.kv_block = kb;
      m.blocks.q_blocks = nq, m.blocks.kv_blocks = nk;
    }
    const std::string what = " trial " + std::to_string(trial) + " seed " + std::to_string(seed);
    for (int64_t i = 0; i < sq; ++i) {
      const core::Range keys = core::row_keys(m, 0, i, i + 1, sq, sk);
      for (int64_t j = 0; j < sk; ++j) {
        const bool v = core::visible(m, 0, 0, i, j, sq, sk);
        ASSERT_EQ(v, flex_visible(m, kinds, qb, kb, nk, i, j, sq, sk)) << "row " << i << " key " << j << what;
        if (!v) continue;
        ASSERT_TRUE(j >= keys.begin && j < keys.end) << "row_keys misses row " << i << " key " << j << what;
        const core::Range rows = core::key_rows(m, 0, j, j + 1, sq, sk);
        ASSERT_TRUE(i >= rows.begin && i < rows.end) << "key_rows misses row " << i << " key " << j << what;
      }
    }
    const int64_t i0 = uni(0, sq - 1), i1 = uni(i0 + 1, sq), j0 = uni(0, sk - 1), j1 = uni(j0 + 1, sk);
    const core::TileMask tile = core::tile_mask(m, 0, 0, i0, i1, j0, j1, sk);
    const core::Range keys = core::row_keys(m, 0, i0, i1, sq, sk), rows = core::key_rows(m, 0, j0, j1, sq, sk);
    for (int64_t i = i0; i < i1; ++i)
      for (int64_t j = j0; j < j1; ++j) {
        const bool v = core::visible(m, 0, 0, i, j, sq, sk);
        if (tile != core::TileMask::mixed) ASSERT_EQ(v, tile == core::TileMask::all) << "tile_mask" << what;
        if (v) ASSERT_TRUE(j >= keys.begin && j < keys.end && i >= rows.begin && i < rows.end) << "tile bounds" << what;
      }
  }
}

TEST(DocumentMask, PackedDocuments) {
  const int64_t shapes[][2] = {{70, 70}, {1, 1}, {17, 17}, {65, 130}, {130, 45}};
  for (const auto &s : shapes)
    for (int causal : {0, 1}) {
      MaskCase c;
      std::mt19937_64 rng(c.seed);
      c.seqlen_q = s[0], c.seqlen_k = s[1], c.causal = causal, c.heads_q = 4, c.heads_kv = 2;
      same_documents(c, rng, 4);
      check_cpu_levels(c);
    }
}

TEST(DocumentMask, ScatteredIdsWindowChunkBf16) {
  MaskCase c;
  std::mt19937_64 rng(c.seed);
  c.seqlen_q = 90, c.seqlen_k = 110, c.heads_q = 3, c.heads_kv = 1, c.head_dim = 24, c.dtype = FLASHBOX_BFLOAT16;
  c.docs_q = document_ids(rng, c.batch, c.seqlen_q, 3, true);
  c.docs_k = document_ids(rng, c.batch, c.seqlen_k, 3, true);
  c.window_left = 30, c.window_right = 10;
  check_cpu_levels(c);
  c.window_left = c.window_right = -1, c.causal = 1, c.attention_chunk = 32;
  check_cpu_levels(c);
}

TEST(DocumentMask, VariableLengthAndSeqused) {
  MaskCase c;
  std::mt19937_64 rng(c.seed);
  c.lens_q = {17, 0, 80, 5, 64};
  c.lens_k = {20, 9, 100, 1, 64};
  c.heads_q = 4, c.heads_kv = 2, c.causal = 1;
  c.docs_q = document_ids(rng, 1, 166, 9, false);  // packed [total_q]
  c.docs_k = document_ids(rng, 1, 194, 9, false);
  check_cpu_levels(c);
  MaskCase u;
  u.batch = 3, u.seqlen_q = 40, u.seqlen_k = 50, u.used_q = {40, 7, 0}, u.used_k = {31, 50, 4};
  rng.seed(u.seed);
  same_documents(u, rng, 3);
  check_cpu_levels(u);
}

TEST(PrefixLm, CausalWithBidirectionalPrefix) {
  const int64_t shapes[][2] = {{70, 70}, {1, 1}, {17, 17}, {45, 130}, {130, 45}};
  for (const auto &s : shapes) {
    MaskCase c;
    c.batch = 4, c.seqlen_q = s[0], c.seqlen_k = s[1], c.causal = 1, c.heads_q = 4, c.heads_kv = 1;
    c.prefix = {0, int32_t(s[1]), int32_t(s[1] / 2), int32_t(std::min<int64_t>(s[1], 3))};
    check_cpu_levels(c);
  }
}

TEST(PrefixLm, WithWindowDocumentsSeqused) {
  MaskCase c;
  c.batch = 3, c.seqlen_q = 100, c.seqlen_k = 100, c.causal = 1, c.window_left = 10, c.prefix = {40, 0, 100};
  check_cpu_levels(c);
  c.seed = fresh_seed();
  std::mt19937_64 rng(c.seed);
  same_documents(c, rng, 3);
  c.dtype = FLASHBOX_BFLOAT16;
  check_cpu_levels(c);
  c.used_q = {60, 100, 3}, c.used_k = {70, 1, 100}, c.prefix = {65, 1, 0};
  check_cpu_levels(c);
  MaskCase v;  // variable length: the prefix of each sequence
  v.lens_q = {30, 0, 8}, v.lens_k = {30, 5, 12}, v.prefix = {10, 5, 12}, v.causal = 1;
  check_cpu_levels(v);
}

TEST(BlockMask, RandomHalfSparse) {
  // 50 % of the block pairs skipped, the rest partial or full; blocks that do not divide T.
  const int64_t shapes[][2] = {{1, 1}, {17, 17}, {65, 65}, {65, 130}, {130, 33}};
  const int64_t sizes[][2] = {{16, 16}, {7, 13}, {64, 24}, {128, 128}};
  for (size_t si = 0; si < std::size(shapes); ++si)
    for (size_t bi = 0; bi < std::size(sizes); ++bi)
      for (int causal : {0, 1}) {
        // The sanitizer build takes one causal setting per pair, alternating: each shape and each
        // block size still meets both.
        if (flashbox::test::kSanitizerBuild && causal != int((si + bi) % 2)) continue;
        const auto &s = shapes[si];
        const auto &bs = sizes[bi];
        MaskCase c;
        std::mt19937_64 rng(c.seed);
        c.seqlen_q = s[0], c.seqlen_k = s[1], c.causal = causal, c.heads_q = 4, c.heads_kv = 2;
        c.blocks = random_blocks(rng, c, bs[0], bs[1], c.batch, c.heads_q, 0.5, 0.5);
        c.blocks.transposes = causal;
        check_cpu_levels(c);
      }
}

TEST(BlockMask, LongSequenceBf16) {
  MaskCase c;
  std::mt19937_64 rng(c.seed);
  const int64_t t = flashbox::test::unless_sanitized<int64_t>(1000, 250);  // blocks of 48 x 40 do not divide it
  c.batch = 1, c.seqlen_q = t, c.seqlen_k = t, c.heads_q = 2, c.heads_kv = 1, c.causal = 1;
  c.dtype = FLASHBOX_BFLOAT16;
  c.blocks = random_blocks(rng, c, 48, 40, 1, 1, 0.5, 0.3);
  check_cpu_levels(c);
}

TEST(BlockMask, BroadcastAndPartialOnly) {
  for (int64_t batches : {1, 2})
    for (int64_t heads : {1, 4}) {
      MaskCase c;
      std::mt19937_64 rng(c.seed);
      c.seqlen_q = 70, c.seqlen_k = 90, c.heads_q = 4, c.heads_kv = 1, c.window_left = 25;
      c.blocks = random_blocks(rng, c, 32, 16, batches, heads, 0.5, batches == heads ? 0.0 : 0.5);
      c.blocks.full_lists = batches != heads;
      c.blocks.transposes = true;
      check_cpu_levels(c);
    }
}

TEST(BlockMask, WithDocumentsPrefixSequsedSinkSoftcap) {
  MaskCase c;
  std::mt19937_64 rng(c.seed);
  c.batch = 3, c.seqlen_q = 80, c.seqlen_k = 80, c.causal = 1, c.heads_q = 2, c.heads_kv = 2;
  same_documents(c, rng, 3);
  c.prefix = {20, 0, 80};
  c.blocks = random_blocks(rng, c, 16, 32, 3, 1, 0.4, 0.4);
  check_cpu_levels(c);
  c.used_q = {80, 33, 0}, c.used_k = {50, 80, 9}, c.sink = true, c.softcap = 5.0f, c.alibi = 1;
  c.prefix = {20, 0, 9};
  check_cpu_levels(c);
}

TEST(BlockMask, RowsWithoutKeys) {
  // Whole rows of blocks unlisted (and partial blocks the causal rule empties): o = 0, lse = -inf,
  // zero gradients, both levels.
  MaskCase c;
  std::mt19937_64 rng(c.seed);
  c.seqlen_q = 65, c.seqlen_k = 65, c.causal = 1, c.heads_q = 2, c.heads_kv = 1;
  c.blocks = random_blocks(rng, c, 16, 16, 1, 1, 0.3, 0.3);
  const int64_t nk = blocks_of(65, 16);
  for (int64_t r : {1, 3}) std::fill_n(c.blocks.kinds.begin() + r * nk, nk, core::kBlockSkipped);
  MaskData probe(c);
  EXPECT_GE(probe.empty_rows(), 2 * 16 * c.batch);  // the two unlisted rows of blocks, every head
  check_cpu_levels(c);
}

TEST(BlockMask, EqualToCausalGivesCausal) {
  // Blocks wholly below the diagonal full, blocks on it partial (the causal element mask), blocks
  // above it skipped: FlexAttention's causal BlockMask; o and lse equal the plain causal call's.
  for (const int64_t t : {17, 65, 200}) {
    MaskCase c;
    c.seqlen_q = t, c.seqlen_k = t, c.causal = 1, c.heads_q = 2, c.heads_kv = 1;
    MaskData causal(c);
    const int64_t qb = 16, kb = 24, nq = blocks_of(t, qb), nk = blocks_of(t, kb);
    c.blocks.q_block = qb, c.blocks.kv_block = kb, c.blocks.transposes = true;
    for (int64_t r = 0; r < nq; ++r)
      for (int64_t k = 0; k < nk; ++k) {
        const int64_t last_row = std::min(t, (r + 1) * qb) - 1, last_key = std::min(t, (k + 1) * kb) - 1;
        c.blocks.kinds.push_back(k * kb > last_row    ? core::kBlockSkipped
                                 : last_key <= r * qb ? core::kBlockFull
                                                      : core::kBlockPartial);
      }
    MaskData blocked(c);
    for (flashbox_impl impl : {FLASHBOX_NAIVE, FLASHBOX_BLOCKED}) {
      SCOPED_TRACE(std::string(flashbox_impl_name(impl)) + " T " + std::to_string(t) + " " + causal.name());
      ASSERT_EQ(causal.forward(impl), FLASHBOX_OK) << flashbox_last_error();
      ASSERT_EQ(blocked.forward(impl), FLASHBOX_OK) << flashbox_last_error();
      EXPECT_LT(blocked.o_error().rel, 1e-5);
      EXPECT_LT(causal.o_error().rel, 1e-5);
      double worst = 0;
      for (size_t i = 0; i < causal.o_bytes().size() / 4; ++i) {
        float x, y;
        std::memcpy(&x, causal.o_bytes().data() + 4 * i, 4), std::memcpy(&y, blocked.o_bytes().data() + 4 * i, 4);
        worst = std::max(worst, double(std::abs(x - y)));
      }
      EXPECT_LT(worst, 1e-6) << "the causal block mask's o differs from causal's";
      for (size_t i = 0; i < causal.lse().size(); ++i) ASSERT_NEAR(causal.lse()[i], blocked.lse()[i], 1e-5) << i;
    }
  }
}

}  // namespace
