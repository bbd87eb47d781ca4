// CPU backward (naive and blocked) against the fp64 reference backward: the forward's shape cases
// (T = 1, 17, 63, 64, 65, 1000), seqlen_q != seqlen_k with empty rows, GQA/MQA, strided layouts,
// causal or not, fp32 (< 1e-5), fp16 and bf16 (< 1e-2), poisoned outputs; determinism and scratch.
// The sanitizer build (support/sanitizer_build.hpp) runs T = 250 for 1000 (and 130 keys for 300), and
// one level per dtype and layout, alternating.
#include <gtest/gtest.h>

#include <iterator>

#include "backward_case.hpp"
#include "support/sanitizer_build.hpp"

namespace flashbox::test {
namespace {

struct CpuBackwardCase {
  AttentionCase c;
};

void run_and_check(AttentionCase c, flashbox_impl impl) {
  c.impl = impl;
  BackwardData d(c);
  ASSERT_EQ(flashbox_attention_backward(&d.grad), 0) << flashbox_last_error() << " " << d.name();
  d.expect_close();
}

class CpuBackwardShapes : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

// (seqlen_q, seqlen_k, causal) for both levels in fp32; one query head pair, one kv head.
TEST_P(CpuBackwardShapes, NaiveAndBlockedFp32) {
  const auto [sq, sk, causal] = GetParam();
  const AttentionCase c{
      .batch = 2, .seqlen_q = sq, .seqlen_k = sk, .heads_q = 2, .heads_kv = 1, .head_dim = 32, .causal = causal};
  run_and_check(c, FLASHBOX_NAIVE);
  run_and_check(c, FLASHBOX_BLOCKED);
}

INSTANTIATE_TEST_SUITE_P(Lengths, CpuBackwardShapes,
                         ::testing::Combine(::testing::Values(1, 17, 63, 64, 65), ::testing::Values(1, 17, 64, 65),
                                            ::testing::Values(0, 1)));

TEST(CpuBackward, LongSequenceBlockedBf16Causal) {
  const int64_t t = unless_sanitized<int64_t>(1000, 250);
  run_and_check({.batch = 1,
                 .seqlen_q = t,
                 .seqlen_k = t,
                 .heads_q = 1,
                 .heads_kv = 1,
                 .head_dim = 64,
                 .dtype = FLASHBOX_BFLOAT16,
                 .causal = 1},
                FLASHBOX_AUTO);
}

TEST(CpuBackward, LongSequenceBlockedFp32Full) {
  run_and_check({.batch = 1,
                 .seqlen_q = unless_sanitized<int64_t>(1000, 250),
                 .seqlen_k = unless_sanitized<int64_t>(300, 130),
                 .heads_q = 1,
                 .heads_kv = 1,
                 .head_dim = 64},
                FLASHBOX_BLOCKED);
}

TEST(CpuBackward, DtypesLayoutsGqa) {
  const flashbox_dtype dtypes[] = {FLASHBOX_FLOAT32, FLASHBOX_FLOAT16, FLASHBOX_BFLOAT16};
  const Layout layouts[] = {Layout::BTHD, Layout::BHTD, Layout::PADDED};
  for (size_t ti = 0; ti < std::size(dtypes); ++ti)
    for (size_t li = 0; li < std::size(layouts); ++li)
      for (flashbox_impl impl : {FLASHBOX_NAIVE, FLASHBOX_BLOCKED}) {
        // The sanitizer build: one level per (dtype, layout), alternating, so each dtype and each
        // layout still meets both.
        if (kSanitizerBuild && (impl == FLASHBOX_BLOCKED) != bool((ti + li) % 2)) continue;
        const flashbox_dtype t = dtypes[ti];
        const Layout l = layouts[li];
        run_and_check({.batch = 2,
                       .seqlen_q = 70,
                       .seqlen_k = 90,
                       .heads_q = 4,
                       .heads_kv = 2,
                       .head_dim = 64,
                       .dtype = t,
                       .causal = 1,
                       .layout = l},
                      impl);
      }
}

TEST(CpuBackward, MqaHeadDim128ScaleAndOddHeadDim) {
  run_and_check({.batch = 1,
                 .seqlen_q = 80,
                 .seqlen_k = 80,
                 .heads_q = 3,
                 .heads_kv = 1,
                 .head_dim = 128,
                 .dtype = FLASHBOX_BFLOAT16,
                 .causal = 1,
                 .softmax_scale = 0.05f},
                FLASHBOX_BLOCKED);
  run_and_check({.batch = 1, .seqlen_q = 33, .seqlen_k = 47, .heads_q = 2, .heads_kv = 2, .head_dim = 40},
                FLASHBOX_NAIVE);
  run_and_check({.batch = 1, .seqlen_q = 33, .seqlen_k = 47, .heads_q = 2, .heads_kv = 2, .head_dim = 40},
                FLASHBOX_BLOCKED);
}

// seqlen_q > seqlen_k, causal: the first seqlen_q - seqlen_k rows see no key and get dQ = 0 exactly;
// keys no query sees get dK = dV = 0.
TEST(CpuBackward, EmptyRowsGiveZeroGradients) {
  for (flashbox_impl impl : {FLASHBOX_NAIVE, FLASHBOX_BLOCKED}) {
    BackwardData d({.batch = 1,
                    .seqlen_q = 100,
                    .seqlen_k = 30,
                    .heads_q = 2,
                    .heads_kv = 1,
                    .head_dim = 16,
                    .causal = 1,
                    .impl = impl});
    ASSERT_EQ(flashbox_attention_backward(&d.grad), 0) << flashbox_last_error();
    d.expect_close();
    const float *dq = reinterpret_cast<const float *>(d.dq_bytes().data());
    for (int64_t i = 0; i < 70; ++i)
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t x = 0; x < 16; ++x)
          ASSERT_EQ(dq[d.grad.dq_stride[1] * i + d.grad.dq_stride[2] * h + x], 0.0f) << "row " << i << " " << d.name();
  }
}

TEST(CpuBackward, DeterministicAndScratchMatchesWorkspaceSize) {
  for (flashbox_impl impl : {FLASHBOX_NAIVE, FLASHBOX_BLOCKED}) {
    BackwardData d({.batch = 2,
                    .seqlen_q = 130,
                    .seqlen_k = 70,
                    .heads_q = 4,
                    .heads_kv = 2,
                    .head_dim = 32,
                    .dtype = FLASHBOX_BFLOAT16,
                    .causal = 1,
                    .impl = impl});
    d.grad.deterministic = 1;
    ASSERT_EQ(flashbox_attention_backward(&d.grad), 0) << flashbox_last_error();
    const int64_t peak = flashbox_last_scratch_peak_bytes();
    EXPECT_EQ(peak, flashbox_attention_backward_workspace_size(&d.grad)) << d.name();
    EXPECT_GT(peak, 0);
    EXPECT_STREQ(flashbox_last_kernel(), impl == FLASHBOX_NAIVE ? "cpu_backward_naive" : "cpu_backward_blocked_64x64");
    const std::vector<uint8_t> dq = d.dq_bytes(), dk = d.dk_bytes(), dv = d.dv_bytes();
    d.poison();
    ASSERT_EQ(flashbox_attention_backward(&d.grad), 0) << flashbox_last_error();
    EXPECT_TRUE(dq == d.dq_bytes() && dk == d.dk_bytes() && dv == d.dv_bytes())
        << "not bitwise repeatable: " << d.name();
  }
}

}  // namespace
}  // namespace flashbox::test
