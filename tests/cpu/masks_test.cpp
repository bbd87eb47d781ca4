// Sliding window, softcap, ALiBi and variable-length batches on the CPU levels (naive and blocked,
// forward and backward, through flashbox_attention_forward_ext / _backward_ext) against the fp64
// reference on fresh random inputs (seed printed). Also the mask bounds of src/core/masks.hpp
// against FlashAttention-2's window and FlashAttention-3's chunk, written out element by element.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/masks.hpp"
#include "support/mask_case.hpp"

using flashbox::test::MaskCase;
using flashbox::test::MaskData;
using flashbox::test::check_cpu_levels;

namespace {

// FlashAttention-2's window (tests/test_flash_attn.py construct_local_mask, with its -1 = unbounded
// and causal = right 0) and FlashAttention-3's chunk (hopper/test_util.py construct_chunk_mask), one
// element at a time: true when row i may see key j.
bool fa_visible(int64_t i, int64_t j, int64_t sq, int64_t sk, const flashbox::core::ScoreMods &m) {
  const int64_t diag = i + sk - sq;
  if (m.window_right >= 0 && j > diag + m.window_right) return false;
  if (m.window_left >= 0 && j < diag - m.window_left) return false;
  if (m.chunk > 0) {
    const int64_t start = int64_t(std::floor(double(diag) / double(m.chunk))) * m.chunk;
    if (j < start || j >= start + m.chunk) return false;
  }
  return j >= 0 && j < sk;
}

TEST(Masks, BoundsMatchFlashAttentionDefinition) {
  const uint64_t seed = flashbox::test::fresh_seed();
  std::mt19937_64 rng(seed);
  auto uni = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  for (int trial = 0; trial < 6000; ++trial) {
    const int64_t sq = uni(1, 40), sk = uni(1, 40);
    flashbox::core::ScoreMods m;
    m.window_left = uni(-1, 45), m.window_right = trial % 3 ? uni(-1, 45) : 0;
    m.chunk = trial % 2 ? uni(1, 20) : 0;
    const std::string what = " sq " + std::to_string(sq) + " sk " + std::to_string(sk) + " window " +
                             std::to_string(m.window_left) + "," + std::to_string(m.window_right) + " chunk " +
                             std::to_string(m.chunk) + " seed " + std::to_string(seed);
    for (int64_t i = 0; i < sq; ++i) {
      const int64_t kb = flashbox::core::key_begin(m, i, sq, sk), ke = flashbox::core::key_end(m, i, sq, sk);
      for (int64_t j = 0; j < sk; ++j)
        ASSERT_EQ(j >= kb && j < ke, fa_visible(i, j, sq, sk, m)) << "row " << i << " key " << j << what;
      if (i > 0) {  // the blocked levels rely on bounds that never decrease
        ASSERT_GE(kb, flashbox::core::key_begin(m, i - 1, sq, sk)) << what;
        ASSERT_GE(ke, flashbox::core::key_end(m, i - 1, sq, sk)) << what;
      }
    }
    for (int64_t j = 0; j < sk; ++j) {
      const int64_t qb = flashbox::core::query_begin(m, j, sq, sk), qe = flashbox::core::query_end(m, j, sq, sk);
      for (int64_t i = 0; i < sq; ++i)
        ASSERT_EQ(i >= qb && i < qe, fa_visible(i, j, sq, sk, m)) << "key " << j << " row " << i << what;
    }
  }
}

TEST(Masks, ScoreTransforms) {
  // softcap: cap tanh(s / cap), and its derivative through the capped value; ALiBi FA2's sign.
  EXPECT_DOUBLE_EQ(flashbox::core::capped_score(3.0, 0.0), 3.0);
  EXPECT_NEAR(flashbox::core::capped_score(3.0, 2.0), 2.0 * std::tanh(1.5), 1e-15);
  const double c = flashbox::core::capped_score(0.7, 1.3);
  EXPECT_NEAR(flashbox::core::softcap_grad(c, 1.3), 1.0 - std::tanh(0.7 / 1.3) * std::tanh(0.7 / 1.3), 1e-15);
  EXPECT_DOUBLE_EQ(flashbox::core::alibi_bias(0.5, 2, 7, 4, 10), -0.5 * std::abs(2 + 10 - 4 - 7));
  EXPECT_DOUBLE_EQ(flashbox::core::alibi_bias(0.5, 3, 9, 4, 10), -0.5 * 0);
}

struct Window {
  int32_t left, right;
};

TEST(Masks, SlidingWindowForwardBackward) {
  const Window windows[] = {{-1, -1}, {5, -1}, {-1, 3}, {4, 2}, {0, 0}, {70, 0}, {200, 200}, {13, 40}};
  const int64_t shapes[][2] = {{70, 70}, {45, 70}, {70, 45}, {1, 33}, {33, 1}};
  for (const Window &w : windows)
    for (const auto &s : shapes) {
      MaskCase c;
      c.seqlen_q = s[0], c.seqlen_k = s[1], c.window_left = w.left, c.window_right = w.right;
      check_cpu_levels(c);
    }
}

TEST(Masks, CausalWithLeftWindowAndSkippedBlocks) {
  // Blocks entirely left of the window are skipped in the blocked levels: long rows, short windows.
  for (int32_t left : {0, 1, 63, 64, 100}) {
    MaskCase c;
    c.batch = 1, c.seqlen_q = 200, c.seqlen_k = 260, c.causal = 1, c.window_left = left;
    c.window_right = left % 2 ? -1 : 0;  // with causal, right = -1 and right = 0 mean the same
    check_cpu_levels(c);
  }
}

TEST(Masks, SoftcapForwardBackward) {
  for (float cap : {0.5f, 2.0f, 30.0f})
    for (int causal : {0, 1}) {
      MaskCase c;
      c.seqlen_q = 50, c.seqlen_k = 67, c.softcap = cap, c.causal = causal, c.heads_q = 4, c.heads_kv = 2;
      check_cpu_levels(c);
    }
}

TEST(Masks, AlibiForwardBackward) {
  for (int alibi : {1, 2})
    for (int causal : {0, 1})
      for (const auto &s : {std::pair<int64_t, int64_t>{65, 65}, {30, 90}, {90, 30}}) {
        MaskCase c;
        c.seqlen_q = s.first, c.seqlen_k = s.second, c.alibi = alibi, c.causal = causal, c.heads_q = 3, c.heads_kv = 3;
        check_cpu_levels(c);
      }
}

TEST(Masks, EverythingTogetherBf16) {
  MaskCase c;
  c.batch = 2, c.seqlen_q = 130, c.seqlen_k = 150, c.heads_q = 4, c.heads_kv = 2, c.head_dim = 40;
  c.dtype = FLASHBOX_BFLOAT16, c.window_left = 30, c.window_right = 20, c.softcap = 3.0f, c.alibi = 2;
  check_cpu_levels(c);
  c.causal = 1, c.window_right = 0, c.seed = flashbox::test::fresh_seed();
  check_cpu_levels(c);
}

TEST(Varlen, ZeroAndOneLengthNeighbours) {
  MaskCase c;
  c.lens_q = {0, 1, 37, 0, 64, 65, 1, 3, 0};
  c.lens_k = {3, 0, 37, 5, 64, 130, 1, 0, 0};
  c.heads_q = 4, c.heads_kv = 2;
  for (int causal : {0, 1}) {
    c.causal = causal, c.seed = flashbox::test::fresh_seed();
    check_cpu_levels(c);
  }
}

TEST(Varlen, WithMasksAndTransforms) {
  MaskCase c;
  c.lens_q = {17, 0, 80, 1, 64};
  c.lens_k = {17, 9, 100, 1, 30};
  c.window_left = 10, c.window_right = 5, c.softcap = 2.0f, c.alibi = 2, c.head_dim = 24;
  check_cpu_levels(c);
  c.alibi = 1, c.causal = 1, c.window_right = 0, c.dtype = FLASHBOX_BFLOAT16, c.seed = flashbox::test::fresh_seed();
  check_cpu_levels(c);
}

TEST(Varlen, RandomLengths) {
  const uint64_t seed = flashbox::test::fresh_seed();
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 4; ++trial) {
    MaskCase c;
    const int n = int(std::uniform_int_distribution<int>(1, 6)(rng));
    for (int s = 0; s < n; ++s) {
      c.lens_q.push_back(std::uniform_int_distribution<int32_t>(0, 90)(rng));
      c.lens_k.push_back(std::uniform_int_distribution<int32_t>(0, 90)(rng));
    }
    c.lens_q[0] = std::max(c.lens_q[0], 1);  // at least one token in total
    c.lens_k[0] = std::max(c.lens_k[0], 1);
    c.causal = trial % 2, c.seed = seed + uint64_t(trial);
    check_cpu_levels(c);
  }
}

TEST(Varlen, MatchesFixedLengthWhenLengthsAreEqual) {
  // cu_seqlens of equal lengths over a BTHD buffer give the fixed-length answer (same data).
  MaskCase c;
  c.lens_q = {48, 48, 48}, c.lens_k = {48, 48, 48}, c.causal = 1, c.window_left = 9;
  MaskData d(c);
  ASSERT_EQ(d.forward(FLASHBOX_BLOCKED), FLASHBOX_OK) << flashbox_last_error();
  EXPECT_LT(d.o_error().rel, d.tolerance()) << d.name();
  EXPECT_STREQ(flashbox_last_kernel(), "cpu_blocked_64x64_varlen");
}

}  // namespace
