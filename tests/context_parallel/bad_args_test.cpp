// Bad arguments get their error code and a message naming what is wrong, and nothing is written.
#include <gtest/gtest.h>

#include <string>

#include "context_parallel/ring_case.hpp"

namespace flashbox::test {
namespace {

class CpBadArgs : public ::testing::Test {
 protected:
  CpBadArgs()
      : rc_(
            AttentionCase{
                .batch = 1, .seqlen_q = 16, .seqlen_k = 16, .heads_q = 2, .heads_kv = 1, .head_dim = 8, .causal = 1},
            2, cp::Options{}) {}
  int run() { return cp::forward_simulated(rc_.args.data(), 2, opt_); }
  void expect_untouched() {
    for (auto &o : rc_.o)
      for (size_t i = 0; i < o.size(); ++i) ASSERT_EQ(o[i], (i & 1) ? 0x7f : 0xff) << "o written on a failed call";
  }
  RingForwardCase rc_;
  cp::Options opt_{};
};

TEST_F(CpBadArgs, UnequalShardLengths) {
  rc_.args[1].seqlen_k = 7;
  EXPECT_EQ(run(), FLASHBOX_ERR_INVALID_SIZE);
  EXPECT_NE(std::string(cp::last_error()).find("seqlen_q"), std::string::npos) << cp::last_error();
  expect_untouched();
}

TEST_F(CpBadArgs, OddZigzagShard) {
  for (auto &a : rc_.args) a.seqlen_q = a.seqlen_k = 7;
  EXPECT_EQ(run(), FLASHBOX_ERR_INVALID_SIZE);
  EXPECT_NE(std::string(cp::last_error()).find("even"), std::string::npos) << cp::last_error();
  expect_untouched();
}

TEST_F(CpBadArgs, RanksDisagree) {
  rc_.args[1].causal = 0;
  EXPECT_EQ(run(), FLASHBOX_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(cp::last_error()).find("rank 1"), std::string::npos) << cp::last_error();
  expect_untouched();
}

TEST_F(CpBadArgs, NullPointers) {
  rc_.args[0].k = nullptr;
  EXPECT_EQ(run(), FLASHBOX_ERR_NULL_POINTER);
  EXPECT_EQ(cp::forward_simulated(nullptr, 2, opt_), FLASHBOX_ERR_NULL_POINTER);
  expect_untouched();
}

TEST_F(CpBadArgs, BadWorldLayoutVariant) {
  EXPECT_EQ(cp::forward_simulated(rc_.args.data(), 0, opt_), FLASHBOX_ERR_INVALID_SIZE);
  EXPECT_EQ(flashbox_cp_forward_simulated(rc_.args.data(), 2, flashbox_cp_layout(7), FLASHBOX_CP_RING),
            FLASHBOX_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(flashbox_cp_forward_simulated(rc_.args.data(), 2, FLASHBOX_CP_ZIGZAG, flashbox_cp_variant(-1)),
            FLASHBOX_ERR_INVALID_ARGUMENT);
  expect_untouched();
}

// A failure inside flashbox (here an unsupported impl on the CPU) comes back with flashbox's code,
// the rank and step in the message, and the outputs untouched.
TEST_F(CpBadArgs, LocalCallFailureLeavesOutputs) {
  for (auto &a : rc_.args) a.impl = FLASHBOX_FLASH;
  EXPECT_EQ(run(), FLASHBOX_ERR_UNSUPPORTED_IMPL);
  EXPECT_NE(std::string(cp::last_error()).find("rank 0 step 0"), std::string::npos) << cp::last_error();
  expect_untouched();
}

TEST_F(CpBadArgs, BackwardNeedsLse) {
  RingBackwardCase bc(
      AttentionCase{.batch = 1, .seqlen_q = 8, .seqlen_k = 8, .heads_q = 1, .heads_kv = 1, .head_dim = 8}, 2,
      cp::Options{});
  bc.grads[1].fwd.lse = nullptr;
  EXPECT_EQ(cp::backward_simulated(bc.grads.data(), 2), FLASHBOX_ERR_NULL_POINTER);
  EXPECT_NE(std::string(cp::last_error()).find("lse"), std::string::npos) << cp::last_error();
}

TEST(CpNccl, CpuShardIsRejectedAndNullCommToo) {
  flashbox_attention_args a{};
  a.device = FLASHBOX_CPU, a.batch = 1, a.seqlen_q = a.seqlen_k = 4, a.heads_q = a.heads_kv = 1, a.head_dim = 8;
  float buf[64] = {};
  a.q = a.k = a.v = buf, a.o = buf + 32;
  for (int i = 0; i < 3; ++i) a.q_stride[i] = a.k_stride[i] = a.v_stride[i] = a.o_stride[i] = 8;
  EXPECT_EQ(flashbox_cp_forward(&a, FLASHBOX_CP_ZIGZAG, FLASHBOX_CP_RING, nullptr), FLASHBOX_ERR_INVALID_ARGUMENT);
  a.device = FLASHBOX_CUDA;
  EXPECT_EQ(flashbox_cp_forward(&a, FLASHBOX_CP_ZIGZAG, FLASHBOX_CP_RING, nullptr), FLASHBOX_ERR_NULL_POINTER);
}

}  // namespace
}  // namespace flashbox::test
