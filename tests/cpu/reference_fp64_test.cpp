// The fp64 reference is the oracle for everything else, so it is checked against facts that hold
// without any other implementation: one visible key gives O = V and LSE = its score; the output does
// not depend on the key order; rows that see no key give O = 0, LSE = -inf.
#include <gtest/gtest.h>

#include <cmath>

#include "cpu/reference_fp64.hpp"
#include "support/attention_case.hpp"

using namespace flashbox;
using flashbox::test::AttentionCase;
using flashbox::test::AttentionData;

TEST(ReferenceFp64, SingleKeyGivesItsValue) {
  AttentionCase c;
  c.seqlen_q = 5, c.seqlen_k = 1, c.heads_q = 4, c.heads_kv = 2, c.head_dim = 16, c.softmax_scale = 0.3f;
  AttentionData d(c);
  std::vector<double> out, lse;
  cpu::reference_attention_fp64(d.args, out, &lse);
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t h = 0; h < 4; ++h) {
      double score = 0;
      for (int64_t x = 0; x < 16; ++x) {
        const double v = cpu::load_as_float(d.args.v, c.dtype, (h / 2) * d.args.v_stride[2] + x);
        EXPECT_NEAR(out[size_t((i * 4 + h) * 16 + x)], v, 1e-12) << d.name();
        score += double(cpu::load_as_float(d.args.q, c.dtype, i * d.args.q_stride[1] + h * d.args.q_stride[2] + x)) *
                 cpu::load_as_float(d.args.k, c.dtype, (h / 2) * d.args.k_stride[2] + x);
      }
      EXPECT_NEAR(lse[size_t(h * 5 + i)], 0.3 * score, 1e-6) << d.name();
    }
}

TEST(ReferenceFp64, KeyOrderDoesNotMatterWithoutMask) {
  AttentionCase c;
  c.seqlen_q = 7, c.seqlen_k = 9, c.heads_q = 1, c.heads_kv = 1, c.head_dim = 8;
  AttentionData d(c);
  std::vector<double> out, lse, out_rev, lse_rev;
  cpu::reference_attention_fp64(d.args, out, &lse);
  flashbox_attention_args rev = d.args;  // walk keys and values backwards through a negative offset
  rev.k = static_cast<const float *>(d.args.k) + 8 * d.args.k_stride[1];
  rev.v = static_cast<const float *>(d.args.v) + 8 * d.args.v_stride[1];
  rev.k_stride[1] = -rev.k_stride[1], rev.v_stride[1] = -rev.v_stride[1];
  cpu::reference_attention_fp64(rev, out_rev, &lse_rev);
  for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], out_rev[i], 1e-12) << d.name();
  for (size_t i = 0; i < lse.size(); ++i) EXPECT_NEAR(lse[i], lse_rev[i], 1e-12) << d.name();
}

TEST(ReferenceFp64, CausalRowsWithoutKeysAreZero) {
  AttentionCase c;
  c.seqlen_q = 6, c.seqlen_k = 3, c.heads_q = 2, c.heads_kv = 1, c.head_dim = 4, c.causal = 1;
  AttentionData d(c);
  std::vector<double> out, lse;
  cpu::reference_attention_fp64(d.args, out, &lse);
  // Bottom-right alignment: row i sees keys j <= i - 3, so rows 0..2 see nothing, row 3 sees key 0.
  for (int64_t i = 0; i < 6; ++i)
    for (int64_t h = 0; h < 2; ++h) {
      const double l = lse[size_t(h * 6 + i)];
      if (i < 3) {
        EXPECT_TRUE(std::isinf(l) && l < 0) << d.name();
        for (int64_t x = 0; x < 4; ++x) EXPECT_EQ(out[size_t((i * 2 + h) * 4 + x)], 0.0);
      } else {
        EXPECT_TRUE(std::isfinite(l)) << d.name();
      }
    }
  for (int64_t x = 0; x < 4; ++x)  // row 3 sees only key 0: O = V[0]
    EXPECT_NEAR(out[size_t((3 * 2 + 0) * 4 + x)], cpu::load_as_float(d.args.v, c.dtype, x), 1e-12);
}
