// Introspection: the scratch memory each CPU level really allocated (naive: at least S and P; blocked:
// only its per-thread tiles, the same at every sequence length), the kernel that ran, and that a
// failed call leaves the last successful call's values and sets a message.
#include <gtest/gtest.h>

#include <string>

#include "support/attention_case.hpp"
#include "support/sanitizer_build.hpp"

using flashbox::test::AttentionCase;
using flashbox::test::AttentionData;

namespace {

int64_t run_peak(flashbox_impl impl, int64_t seqlen, int64_t heads_q = 3, int64_t batch = 2) {
  AttentionCase c;
  c.batch = batch, c.seqlen_q = seqlen, c.seqlen_k = seqlen, c.heads_q = heads_q, c.heads_kv = 1, c.head_dim = 32;
  c.impl = impl;
  AttentionData d(c);
  EXPECT_EQ(flashbox_attention_forward(&d.args), FLASHBOX_OK) << flashbox_last_error();
  return flashbox_last_scratch_peak_bytes();
}

TEST(Introspection, NaiveReportsAtLeastSAndP) {
  for (int64_t t : {64, 300}) {
    const int64_t s_bytes = 2 * 3 * t * t * 4;  // batch x heads_q x T x T fp32
    EXPECT_GE(run_peak(FLASHBOX_NAIVE, t), 2 * s_bytes) << "T = " << t;
    EXPECT_STREQ(flashbox_last_kernel(), "cpu_naive");
  }
}

TEST(Introspection, BlockedScratchDoesNotGrowWithT) {
  // One tile set per thread, and no more threads than (batch, head, query block) tasks: 2 x 16 heads
  // x 8 query blocks of 64 at T = 512 keep every thread of a machine with up to 256 busy at both
  // lengths, so the two peaks are equal whatever the core count. The sanitizer build
  // (support/sanitizer_build.hpp) runs 4 x 16 heads x 4 query blocks at T = 256 and T = 448: as many
  // tasks, and S at 448 is still larger than 256 threads' tiles.
  const int64_t B = flashbox::test::unless_sanitized<int64_t>(2, 4);
  const int64_t short_t = flashbox::test::unless_sanitized<int64_t>(512, 256);
  const int64_t long_t = flashbox::test::unless_sanitized<int64_t>(1000, 448);
  const int64_t small = run_peak(FLASHBOX_BLOCKED, short_t, 16, B), large = run_peak(FLASHBOX_BLOCKED, long_t, 16, B);
  EXPECT_EQ(small, large) << "blocked must only hold per-thread tiles, independent of T";
  EXPECT_LT(large, B * 16 * long_t * long_t * 4) << "blocked must not hold anything the size of S";
  EXPECT_STREQ(flashbox_last_kernel(), "cpu_blocked_64x64");
}

TEST(Introspection, FailedCallKeepsLastSuccess) {
  const int64_t peak = run_peak(FLASHBOX_NAIVE, 64);
  AttentionCase c;
  AttentionData d(c);
  d.args.causal = 7;
  EXPECT_EQ(flashbox_attention_forward(&d.args), FLASHBOX_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashbox_last_error()), "");
  EXPECT_EQ(flashbox_last_scratch_peak_bytes(), peak);
  EXPECT_STREQ(flashbox_last_kernel(), "cpu_naive");
}

TEST(Introspection, NamesAndVersion) {
  EXPECT_STREQ(flashbox_impl_name(FLASHBOX_AUTO), "auto");
  EXPECT_STREQ(flashbox_impl_name(FLASHBOX_NAIVE), "naive");
  EXPECT_STREQ(flashbox_impl_name(FLASHBOX_BLOCKED), "blocked");
  EXPECT_STREQ(flashbox_impl_name(FLASHBOX_FLASH), "flash");
  EXPECT_STREQ(flashbox_impl_name(static_cast<flashbox_impl>(42)), "unknown");
  EXPECT_NE(std::string(flashbox_version()), "");
  EXPECT_GE(flashbox_cuda_device_count(), 0);
#ifndef FLASHBOX_HAVE_CUDA
  EXPECT_EQ(flashbox_cuda_device_count(), 0);
#endif
}

}  // namespace

namespace {

TEST(Introspection, NaiveRefusesScoresThatDoNotFit) {
  // 300,000 x 300,000 fp32 scores are 360 GB for S alone: naive must fail cleanly, write nothing and
  // keep the previous call's introspection, instead of being killed touching memory it cannot have.
  const int64_t peak = run_peak(FLASHBOX_BLOCKED, 64);
  AttentionCase c;
  c.batch = 1, c.seqlen_q = 300000, c.seqlen_k = 300000, c.heads_q = 1, c.heads_kv = 1, c.head_dim = 1;
  c.impl = FLASHBOX_NAIVE;
  AttentionData d(c);
  const std::vector<uint8_t> o_before = d.o_bytes();
  EXPECT_EQ(flashbox_attention_forward(&d.args), FLASHBOX_ERR_OUT_OF_MEMORY);
  EXPECT_NE(std::string(flashbox_last_error()).find("naive"), std::string::npos) << flashbox_last_error();
  EXPECT_EQ(d.o_bytes(), o_before);
  EXPECT_EQ(flashbox_last_scratch_peak_bytes(), peak);
  EXPECT_STREQ(flashbox_last_kernel(), "cpu_blocked_64x64");
}

}  // namespace
