// Every CPU level against the fp64 reference on fresh random inputs: sequence lengths around the
// 64-row block edges, seqlen_q != seqlen_k both ways (with causal rows that see no key), GQA and MQA,
// dense and strided layouts, fp32/fp16/bf16, and a non-default softmax scale. Outputs start poisoned
// with NaN; the LSE is checked too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "support/attention_case.hpp"
#include "support/sanitizer_build.hpp"

using flashbox::test::AttentionCase;
using flashbox::test::AttentionData;
using flashbox::test::Layout;

namespace {

struct Shape {
  int64_t batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim;
};

void run_and_check(const AttentionCase &c) {
  AttentionData d(c);
  SCOPED_TRACE(std::string(flashbox_impl_name(c.impl)) + " " + d.name());
  ASSERT_EQ(flashbox_attention_forward(&d.args), FLASHBOX_OK) << flashbox_last_error();
  const auto r = d.compare();
  EXPECT_FALSE(r.has_nan);
  EXPECT_LT(r.rel_error, d.tolerance()) << "max abs error " << r.max_abs_error;
  EXPECT_LT(r.lse_max_abs_error, d.lse_tolerance());
  EXPECT_TRUE(d.o_padding_untouched());
}

class CpuForward : public ::testing::TestWithParam<flashbox_impl> {};

TEST_P(CpuForward, SeqlensAroundBlockEdges) {
  for (int64_t t : {1, 17, 63, 64, 65, 129})
    for (int causal : {0, 1}) {
      AttentionCase c;
      c.impl = GetParam(), c.seqlen_q = t, c.seqlen_k = t, c.heads_q = 2, c.heads_kv = 2, c.causal = causal;
      run_and_check(c);
    }
}

TEST_P(CpuForward, LongSequenceBf16) {
  // The sanitizer build: 333 tokens (six 64-row tiles, the last partial), a ninth of the work.
  const int64_t t = flashbox::test::unless_sanitized<int64_t>(1000, 333);
  AttentionCase c;
  c.impl = GetParam(), c.batch = 1, c.seqlen_q = t, c.seqlen_k = t, c.heads_q = 2, c.heads_kv = 1;
  c.dtype = FLASHBOX_BFLOAT16;
  for (int causal : {0, 1}) {
    c.causal = causal;
    run_and_check(c);
  }
}

TEST_P(CpuForward, SeqlenQDiffersFromSeqlenK) {
  // Bottom-right causal: with seqlen_q > seqlen_k the first seqlen_q - seqlen_k rows see no key.
  for (auto [sq, sk] : std::vector<std::pair<int64_t, int64_t>>{{17, 100}, {100, 17}, {1, 65}, {65, 1}, {130, 64}})
    for (int causal : {0, 1}) {
      AttentionCase c;
      c.impl = GetParam(), c.seqlen_q = sq, c.seqlen_k = sk, c.causal = causal, c.head_dim = 32;
      run_and_check(c);
    }
}

TEST_P(CpuForward, RowsWithoutKeysAreExactlyZero) {
  // seqlen_q = 90, seqlen_k = 20, causal: rows 0..69 see no key (they straddle a 64-row block edge).
  AttentionCase c;
  c.impl = GetParam(), c.seqlen_q = 90, c.seqlen_k = 20, c.causal = 1, c.head_dim = 16, c.dtype = FLASHBOX_BFLOAT16;
  AttentionData d(c);
  ASSERT_EQ(flashbox_attention_forward(&d.args), FLASHBOX_OK) << flashbox_last_error();
  const std::vector<double> out = d.output_dense();
  for (int64_t i = 0; i < c.seqlen_q; ++i)
    for (int64_t h = 0; h < c.heads_q; ++h) {
      const float lse = d.lse[size_t(h * c.seqlen_q + i)];
      double row_abs = 0;
      for (int64_t x = 0; x < c.head_dim; ++x) row_abs += std::abs(out[size_t((i * c.heads_q + h) * c.head_dim + x)]);
      if (i < 70) {
        EXPECT_EQ(row_abs, 0.0) << "row " << i << " " << d.name();
        EXPECT_TRUE(std::isinf(lse) && lse < 0) << "row " << i << " lse " << lse;
      } else {
        EXPECT_GT(row_abs, 0.0) << "row " << i;
        EXPECT_TRUE(std::isfinite(lse)) << "row " << i << " lse " << lse;
      }
    }
  EXPECT_LT(d.compare().rel_error, 1e-2) << d.name();
}

TEST_P(CpuForward, GroupedAndMultiQuery) {
  for (auto [hq, hkv] : std::vector<std::pair<int64_t, int64_t>>{{4, 2}, {6, 1}, {3, 3}}) {
    AttentionCase c;
    c.impl = GetParam(), c.batch = 2, c.seqlen_q = 70, c.seqlen_k = 90, c.heads_q = hq, c.heads_kv = hkv, c.causal = 1;
    c.dtype = FLASHBOX_FLOAT16;
    run_and_check(c);
  }
}

TEST_P(CpuForward, LayoutsDtypesAndScale) {
  for (Layout layout : {Layout::BTHD, Layout::BHTD, Layout::PADDED})
    for (flashbox_dtype dt : {FLASHBOX_FLOAT32, FLASHBOX_FLOAT16, FLASHBOX_BFLOAT16}) {
      AttentionCase c;
      c.impl = GetParam(), c.batch = 2, c.seqlen_q = 67, c.seqlen_k = 67, c.heads_q = 2, c.heads_kv = 1;
      c.head_dim = 40, c.layout = layout, c.dtype = dt, c.causal = dt == FLASHBOX_FLOAT16;
      c.softmax_scale = dt == FLASHBOX_BFLOAT16 ? 0.05f : 0.0f;
      run_and_check(c);
    }
}

TEST_P(CpuForward, HeadDims) {
  for (int64_t d : {1, 8, 100, 128, 256}) {
    AttentionCase c;
    c.impl = GetParam(), c.seqlen_q = 33, c.seqlen_k = 80, c.heads_q = 1, c.heads_kv = 1, c.head_dim = d;
    c.causal = 1, c.uniform = true;
    run_and_check(c);
  }
}

TEST_P(CpuForward, LargeScoresDoNotOverflow) {
  // Scores of several hundred: exp without the max subtracted would overflow fp32.
  AttentionCase c;
  c.impl = GetParam(), c.seqlen_q = 70, c.seqlen_k = 70, c.softmax_scale = 20.0f, c.head_dim = 16;
  run_and_check(c);
}

INSTANTIATE_TEST_SUITE_P(Levels, CpuForward, ::testing::Values(FLASHBOX_NAIVE, FLASHBOX_BLOCKED, FLASHBOX_AUTO),
                         [](const auto &info) { return std::string(flashbox_impl_name(info.param)); });

TEST(CpuForward, BlockedAgreesWithNaive) {
  AttentionCase c;
  c.batch = 2, c.seqlen_q = 150, c.seqlen_k = 150, c.heads_q = 4, c.heads_kv = 2, c.causal = 1;
  c.dtype = FLASHBOX_BFLOAT16;
  AttentionData naive(c), blocked(c);
  naive.args.impl = FLASHBOX_NAIVE;
  blocked.args.impl = FLASHBOX_BLOCKED;
  ASSERT_EQ(flashbox_attention_forward(&naive.args), 0) << flashbox_last_error();
  ASSERT_EQ(flashbox_attention_forward(&blocked.args), 0) << flashbox_last_error();
  const std::vector<double> on = naive.output_dense(), ob = blocked.output_dense();
  double diff2 = 0, ref2 = 0;
  for (size_t i = 0; i < on.size(); ++i) diff2 += (on[i] - ob[i]) * (on[i] - ob[i]), ref2 += on[i] * on[i];
  EXPECT_LT(std::sqrt(diff2 / ref2), 1e-2) << naive.name();
  for (size_t i = 0; i < naive.lse.size(); ++i) EXPECT_NEAR(naive.lse[i], blocked.lse[i], 1e-4) << naive.name();
}

TEST(CpuForward, KernelNames) {
  AttentionCase c;
  AttentionData d(c);
  d.args.impl = FLASHBOX_NAIVE;
  ASSERT_EQ(flashbox_attention_forward(&d.args), 0);
  EXPECT_STREQ(flashbox_last_kernel(), "cpu_naive");
  d.args.impl = FLASHBOX_AUTO;
  ASSERT_EQ(flashbox_attention_forward(&d.args), 0);
  EXPECT_STREQ(flashbox_last_kernel(), "cpu_blocked_64x64");
}

}  // namespace
