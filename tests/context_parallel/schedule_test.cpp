// The block schedule against the global mask, pair by pair: over all ring steps (or the all-gather's
// one), every (query, key) pair the global mask allows is computed exactly once and no other pair is.
// Each block is also one of the kinds flashbox's bottom-right causal mask computes exactly.
#include <gtest/gtest.h>

#include <vector>

#include "context_parallel/schedule.hpp"

namespace flashbox::cp {
namespace {

// Global token of row `i` of the K/V buffer a block reads at step `step` (ring) or in global order.
int64_t kv_token(flashbox_cp_layout layout, flashbox_cp_variant variant, int world, int rank, int step, int64_t S,
                 int64_t i) {
  if (variant == FLASHBOX_CP_ALL_GATHER) return i;
  const int src = ((rank - step) % world + world) % world;
  return global_token(layout, world, src, S, i);
}

void check_coverage(flashbox_cp_layout layout, flashbox_cp_variant variant, bool causal, int world, int64_t S) {
  const int64_t T = world * S;
  for (int rank = 0; rank < world; ++rank) {
    std::vector<int> seen(size_t(S * T), 0);  // [local query][global key]
    const int steps = variant == FLASHBOX_CP_RING ? world : 1;
    for (int step = 0; step < steps; ++step) {
      const std::vector<Block> blocks = variant == FLASHBOX_CP_RING ? ring_blocks(layout, causal, world, rank, step, S)
                                                                    : all_gather_blocks(layout, causal, world, rank, S);
      for (const Block &b : blocks) {
        ASSERT_GT(b.q_len, 0);
        ASSERT_GT(b.kv_len, 0);
        ASSERT_LE(b.q_begin + b.q_len, S);
        if (b.causal && variant == FLASHBOX_CP_RING)
          ASSERT_EQ(b.q_len, b.kv_len) << "a ring causal block is a diagonal";
        for (int64_t i = 0; i < b.q_len; ++i)
          for (int64_t j = 0; j < b.kv_len; ++j) {
            if (b.causal && j > i + b.kv_len - b.q_len) continue;  // flashbox's bottom-right mask
            const int64_t key = kv_token(layout, variant, world, rank, step, S, b.kv_begin + j);
            ++seen[size_t((b.q_begin + i) * T + key)];
          }
      }
    }
    for (int64_t t = 0; t < S; ++t) {
      const int64_t qg = global_token(layout, world, rank, S, t);
      for (int64_t key = 0; key < T; ++key) {
        const int want = (!causal || key <= qg) ? 1 : 0;
        ASSERT_EQ(seen[size_t(t * T + key)], want)
            << "rank " << rank << " query " << qg << " key " << key << " world " << world << " S " << S
            << (causal ? " causal" : " full") << (layout == FLASHBOX_CP_ZIGZAG ? " zigzag" : " contiguous")
            << (variant == FLASHBOX_CP_RING ? " ring" : " all-gather");
      }
    }
  }
}

TEST(Schedule, EveryAllowedPairExactlyOnce) {
  for (flashbox_cp_variant variant : {FLASHBOX_CP_RING, FLASHBOX_CP_ALL_GATHER})
    for (flashbox_cp_layout layout : {FLASHBOX_CP_CONTIGUOUS, FLASHBOX_CP_ZIGZAG})
      for (bool causal : {false, true})
        for (int world = 1; world <= 8; ++world)
          for (int64_t S : {2, 6, 10}) check_coverage(layout, variant, causal, world, S);
}

// Zigzag balances the causal work: after step 0 every rank computes S * S/2 pairs at every step.
TEST(Schedule, ZigzagStepsAreBalanced) {
  const int64_t S = 8;
  for (int world = 2; world <= 8; ++world)
    for (int step = 1; step < world; ++step)
      for (int rank = 0; rank < world; ++rank) {
        int64_t pairs = 0;
        for (const Block &b : ring_blocks(FLASHBOX_CP_ZIGZAG, true, world, rank, step, S)) pairs += b.q_len * b.kv_len;
        EXPECT_EQ(pairs, S * S / 2) << "world " << world << " step " << step << " rank " << rank;
      }
}

TEST(Schedule, GlobalTokenZigzag) {
  // world 2, S 4: chunks of 2; rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2.
  const int64_t want0[4] = {0, 1, 6, 7}, want1[4] = {2, 3, 4, 5};
  for (int64_t t = 0; t < 4; ++t) {
    EXPECT_EQ(global_token(FLASHBOX_CP_ZIGZAG, 2, 0, 4, t), want0[t]);
    EXPECT_EQ(global_token(FLASHBOX_CP_ZIGZAG, 2, 1, 4, t), want1[t]);
    EXPECT_EQ(global_token(FLASHBOX_CP_CONTIGUOUS, 2, 1, 4, t), 4 + t);
  }
  EXPECT_EQ(global_token(FLASHBOX_CP_ZIGZAG, 2, 0, 3, 0), -1) << "odd S has no zigzag chunks";
  EXPECT_EQ(global_token(FLASHBOX_CP_ZIGZAG, 2, 2, 4, 0), -1);
  EXPECT_EQ(global_token(FLASHBOX_CP_ZIGZAG, 2, 0, 4, 4), -1);
}

}  // namespace
}  // namespace flashbox::cp
