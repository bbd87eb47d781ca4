// The blocked level with other tile shapes (including ones that are not multiples of the register
// blocks, and a single row or key per tile) must give the same attention: tiling is exact.
#include <gtest/gtest.h>

#include "api/validate.hpp"
#include "core/call_state.hpp"
#include "cpu/blocked_attention.hpp"
#include "support/attention_case.hpp"

using flashbox::test::AttentionCase;
using flashbox::test::AttentionData;

TEST(BlockedTiles, EveryTileShapeMatchesReference) {
  for (auto [bm, bn] : std::vector<std::pair<int, int>>{{1, 1}, {16, 32}, {17, 5}, {64, 64}, {128, 64}, {256, 256}})
    for (int causal : {0, 1}) {
      AttentionCase c;
      c.batch = 1, c.seqlen_q = 77, c.seqlen_k = 93, c.heads_q = 2, c.heads_kv = 1, c.head_dim = 24, c.causal = causal;
      AttentionData d(c);
      SCOPED_TRACE("tiles " + std::to_string(bm) + "x" + std::to_string(bn) + " " + d.name());
      flashbox::detail::begin_call();
      ASSERT_EQ(flashbox::detail::cpu_blocked_forward_tiles(flashbox::detail::make_problem(d.args), bm, bn),
                FLASHBOX_OK);
      EXPECT_EQ(std::string(flashbox::detail::kernel_name()),
                "cpu_blocked_" + std::to_string(bm) + "x" + std::to_string(bn));
      const auto r = d.compare();
      EXPECT_LT(r.rel_error, 1e-5);
      EXPECT_LT(r.lse_max_abs_error, 1e-4);
    }
}

TEST(BlockedTiles, RejectsBadTileSizes) {
  AttentionCase c;
  AttentionData d(c);
  EXPECT_EQ(flashbox::detail::cpu_blocked_forward_tiles(flashbox::detail::make_problem(d.args), 0, 64),
            FLASHBOX_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(flashbox::detail::cpu_blocked_forward_tiles(flashbox::detail::make_problem(d.args), 64, 257),
            FLASHBOX_ERR_INVALID_ARGUMENT);
}
