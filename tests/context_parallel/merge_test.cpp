// The LSE merge on the CPU: its edge cases (empty rows, NaN), and exactness: attention over keys
// [0, a) and [a, Tk) computed apart in fp64, rounded to fp32, merged, equals attention over all keys
// to fp32 rounding (rel. error < 1e-6), through strided O and LSE tensors as the ring uses them.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "context_parallel/device_ops.hpp"
#include "context_parallel/merge_math.hpp"
#include "cpu/reference_fp64.hpp"
#include "support/attention_case.hpp"
#include "support/output_error.hpp"

namespace flashbox::cp {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(MergeMath, EmptyRows) {
  MergeWeights w = merge_weights(-kInf, -kInf);
  EXPECT_EQ(w.w1, 0.0f);
  EXPECT_EQ(w.w2, 0.0f);
  EXPECT_EQ(w.lse, -kInf);
  EXPECT_EQ(merge_value(w, NAN, NAN), 0.0f) << "both empty: O = 0 whatever the partial O hold";
  w = merge_weights(1.5f, -kInf);
  EXPECT_EQ(w.w1, 1.0f);
  EXPECT_EQ(w.w2, 0.0f);
  EXPECT_EQ(w.lse, 1.5f);
  EXPECT_EQ(merge_value(w, 0.25f, NAN), 0.25f) << "an empty part's O is never read";
  w = merge_weights(-kInf, -3.0f);
  EXPECT_EQ(w.lse, -3.0f);
  EXPECT_EQ(merge_value(w, NAN, -2.0f), -2.0f);
}

TEST(MergeMath, NanPropagates) {
  const MergeWeights w = merge_weights(NAN, 0.0f);
  EXPECT_TRUE(std::isnan(w.lse));
  EXPECT_TRUE(std::isnan(merge_value(w, 1.0f, 1.0f)));
  EXPECT_TRUE(std::isnan(merge_weights(0.0f, NAN).lse));
}

TEST(MergeMath, Values) {
  const MergeWeights w = merge_weights(0.0f, 0.0f);
  EXPECT_FLOAT_EQ(w.lse, std::log(2.0f));
  EXPECT_FLOAT_EQ(w.w1, 0.5f);
  EXPECT_FLOAT_EQ(merge_value(w, 1.0f, 3.0f), 2.0f);
  // Far apart: the small term's weight underflows towards 0, the LSE stays the large one.
  const MergeWeights far = merge_weights(-200.0f, 100.0f);
  EXPECT_FLOAT_EQ(far.lse, 100.0f);
  EXPECT_FLOAT_EQ(far.w2, 1.0f);
  EXPECT_LT(far.w1, 1e-30f);
  // Large magnitudes do not overflow (no exp of the LSE itself).
  const MergeWeights big = merge_weights(80.0f, 80.0f);
  EXPECT_FLOAT_EQ(big.lse, 80.0f + std::log(2.0f));
  // Symmetric in its arguments.
  const MergeWeights a = merge_weights(0.3f, -1.7f), b = merge_weights(-1.7f, 0.3f);
  EXPECT_EQ(a.lse, b.lse);
  EXPECT_EQ(a.w1, b.w2);
}

// Dense fp32 O [B, T, H, D] and LSE [B, H, T] of the fp64 reference over keys [k0, k1).
void partial(test::AttentionData &d, int64_t k0, int64_t k1, std::vector<float> &o, std::vector<float> &lse,
             int causal = 0) {
  flashbox_attention_args a = d.args;
  a.causal = causal;
  const int64_t es = cpu::dtype_size(a.dtype);
  a.k = static_cast<const char *>(a.k) + k0 * a.k_stride[1] * es;
  a.v = static_cast<const char *>(a.v) + k0 * a.v_stride[1] * es;
  a.seqlen_k = k1 - k0;
  std::vector<double> out, l;
  cpu::reference_attention_fp64(a, out, &l);
  o.assign(out.begin(), out.end());
  lse.assign(l.begin(), l.end());
}

MergeArgs rows_of(const test::AttentionCase &c, float *acc_o, float *acc_lse, const float *o, const float *lse) {
  MergeArgs m;
  m.n[0] = c.batch, m.n[1] = c.heads_q, m.n[2] = c.seqlen_q, m.head_dim = c.head_dim;
  const int64_t o_rows[3] = {c.seqlen_q * c.heads_q * c.head_dim, c.head_dim, c.heads_q * c.head_dim};
  const int64_t l_rows[3] = {c.heads_q * c.seqlen_q, c.seqlen_q, 1};
  for (int i = 0; i < 3; ++i) {
    m.acc_o_stride[i] = m.part_o_stride[i] = o_rows[i];
    m.acc_lse_stride[i] = m.part_lse_stride[i] = l_rows[i];
  }
  m.acc_o = acc_o, m.acc_lse = acc_lse, m.part_o = o, m.part_lse = lse, m.part_dtype = FLASHBOX_FLOAT32;
  return m;
}

// ||got - ref|| / ||ref|| (support/output_error.hpp); inf when got holds a NaN or inf.
double rel_error(const std::vector<float> &got, const std::vector<double> &ref) {
  return test::rel_error_of([&](size_t i) { return double(got[i]); }, ref).rel_or_inf();
}

TEST(MergeHost, TwoKeyRangesEqualTheWhole) {
  // Causal (bottom-right, Tq 24, Tk 40): query i sees keys j <= i + 16, so keys [0, split) with
  // split <= 17 are all visible (a full part) and keys [split, 40) are a bottom-right causal part.
  for (int causal : {0, 1})
    for (int64_t split : {1, 13, 17}) {
      test::AttentionCase c{
          .batch = 2, .seqlen_q = 24, .seqlen_k = 40, .heads_q = 4, .heads_kv = 2, .head_dim = 16, .causal = causal};
      test::AttentionData d(c);
      std::vector<float> o1, l1, o2, l2;
      partial(d, 0, split, o1, l1, 0);
      partial(d, split, c.seqlen_k, o2, l2, causal);
      merge_host(rows_of(c, o1.data(), l1.data(), o2.data(), l2.data()));
      EXPECT_LT(rel_error(o1, d.reference_out()), 1e-6) << d.name() << " split " << split;
      double lse_err = 0;
      for (size_t i = 0; i < l1.size(); ++i)
        lse_err = std::max(lse_err, double(std::abs(l1[i] - d.reference_lse()[i])));
      EXPECT_LT(lse_err, 1e-5) << d.name() << " split " << split;
    }
}

TEST(MergeHost, EmptyRowsOfOnePartKeepTheOther) {
  test::AttentionCase c{.batch = 1, .seqlen_q = 8, .seqlen_k = 8, .heads_q = 2, .heads_kv = 1, .head_dim = 8};
  test::AttentionData d(c);
  std::vector<float> o1, l1, o2, l2;
  partial(d, 0, 4, o1, l1);
  partial(d, 4, 8, o2, l2);
  std::vector<float> want = o1, want_lse = l1;
  // Part 2 saw no key in rows 0..3 of head 1 (LSE -inf, O garbage); part 1 saw none in row 5 of head 0.
  for (int64_t t = 0; t < 4; ++t) {
    l2[size_t(1 * 8 + t)] = -kInf;
    for (int64_t x = 0; x < 8; ++x) o2[size_t((t * 2 + 1) * 8 + x)] = NAN;
  }
  l1[5] = -kInf;
  for (int64_t x = 0; x < 8; ++x) o1[size_t((5 * 2 + 0) * 8 + x)] = NAN;
  // Row 6 of head 0 is empty in both.
  l1[6] = l2[6] = -kInf;
  for (int64_t x = 0; x < 8; ++x) o1[size_t((6 * 2) * 8 + x)] = o2[size_t((6 * 2) * 8 + x)] = NAN;
  const std::vector<float> o2_in = o2, l2_in = l2;
  merge_host(rows_of(c, o1.data(), l1.data(), o2.data(), l2.data()));
  for (int64_t t = 0; t < 4; ++t) {
    EXPECT_EQ(l1[size_t(8 + t)], want_lse[size_t(8 + t)]);
    for (int64_t x = 0; x < 8; ++x) EXPECT_EQ(o1[size_t((t * 2 + 1) * 8 + x)], want[size_t((t * 2 + 1) * 8 + x)]);
  }
  EXPECT_EQ(l1[5], l2_in[5]);
  for (int64_t x = 0; x < 8; ++x) EXPECT_EQ(o1[size_t(10 * 8 + x)], o2_in[size_t(10 * 8 + x)]);
  EXPECT_EQ(l1[6], -kInf);
  for (int64_t x = 0; x < 8; ++x) EXPECT_EQ(o1[size_t(12 * 8 + x)], 0.0f);
}

TEST(MergeHost, Bf16PartIntoFp32Accumulator) {
  test::AttentionCase c{.batch = 1, .seqlen_q = 16, .seqlen_k = 32, .heads_q = 2, .heads_kv = 2, .head_dim = 16};
  test::AttentionData d(c);
  std::vector<float> o1, l1, o2, l2;
  partial(d, 0, 20, o1, l1);
  partial(d, 20, 32, o2, l2);
  std::vector<uint16_t> o2_bf16(o2.size());
  for (size_t i = 0; i < o2.size(); ++i) o2_bf16[i] = cpu::float_to_bf16(o2[i]);
  MergeArgs m = rows_of(c, o1.data(), l1.data(), nullptr, l2.data());
  m.part_o = o2_bf16.data(), m.part_dtype = FLASHBOX_BFLOAT16;
  merge_host(m);
  EXPECT_LT(rel_error(o1, d.reference_out()), 1e-2) << d.name();
}

}  // namespace
}  // namespace flashbox::cp
