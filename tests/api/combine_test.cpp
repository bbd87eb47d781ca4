// flashbox_attention_combine (FlashAttention-3's flash_attn_combine) on the CPU: the attention over
// all keys rebuilt from per-split partial outputs and LSEs that the fp64 reference computed on key
// ranges (one range empty: its LSE -inf and its partial output NaN, which must not be read), against
// the fp64 reference over all keys, for split-major and batch-major partial layouts, fp32 and bf16
// outputs; rows whose parts all saw no key give O = 0, LSE = -inf; bad arguments refused with nothing
// written (device = cuda: tests/cuda/combine_cuda_test.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "support/attention_case.hpp"
#include "support/output_error.hpp"

using flashbox::test::AttentionCase;
using flashbox::test::AttentionData;

namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

// Partial results of splitting the keys of `d` at `cuts` (key indices, ascending; ranges may be
// empty), laid out [split, batch, token, head, dv] (split_major) or [batch, split, token, head, dv].
struct Partials {
  Partials(AttentionData &d, const std::vector<int64_t> &cuts, bool split_major) {
    const AttentionCase &c = d.config();
    B = c.batch, T = c.seqlen_q, H = c.heads_q, DV = d.dv(), S = int64_t(cuts.size()) + 1;
    const int64_t row = H * DV;
    // Element strides of out_partial (split, batch, token, head) and lse_partial (split, batch, token, head).
    if (split_major) {
      ps[0] = B * T * row, ps[1] = T * row, ls[0] = B * T * H, ls[1] = T * H;
    } else {
      ps[1] = S * T * row, ps[0] = T * row, ls[1] = S * T * H, ls[0] = T * H;
    }
    ps[2] = row, ps[3] = DV, ls[2] = H, ls[3] = 1;
    out.assign(size_t(S * B * T * row), kNan), lse.assign(size_t(S * B * T * H), kNan);
    const int64_t es = flashbox::cpu::dtype_size(c.dtype);
    for (int64_t s = 0; s < S; ++s) {
      const int64_t k0 = s == 0 ? 0 : cuts[size_t(s - 1)], k1 = s + 1 < S ? cuts[size_t(s)] : c.seqlen_k;
      std::vector<double> o, l;
      if (k1 > k0) {
        flashbox_attention_args a = d.args;
        a.seqlen_k = k1 - k0, a.causal = 0;
        a.k = static_cast<const char *>(a.k) + k0 * a.k_stride[1] * es;
        a.v = static_cast<const char *>(a.v) + k0 * a.v_stride[1] * es;
        flashbox::cpu::reference_attention_fp64(a, o, &l, nullptr, DV);
      }
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < T; ++t)
          for (int64_t h = 0; h < H; ++h) {
            const int64_t li = s * ls[0] + b * ls[1] + t * ls[2] + h;
            if (k1 <= k0) {  // no key: LSE -inf, the output left NaN (must be skipped)
              lse[size_t(li)] = -std::numeric_limits<float>::infinity();
              continue;
            }
            lse[size_t(li)] = float(l[size_t((b * H + h) * T + t)]);
            for (int64_t x = 0; x < DV; ++x)
              out[size_t(s * ps[0] + b * ps[1] + t * ps[2] + h * ps[3] + x)] =
                  float(o[size_t(((b * T + t) * H + h) * DV + x)]);
          }
    }
  }
  flashbox_combine_args args(void *o, const int64_t *o_stride, flashbox_dtype t, float *l) const {
    flashbox_combine_args a{};
    a.struct_size = int32_t(sizeof a), a.device = FLASHBOX_CPU, a.out_dtype = t;
    a.num_splits = S, a.batch = B, a.seqlen = T, a.heads = H, a.head_dim_v = DV;
    a.out_partial = out.data(), a.lse_partial = lse.data();
    std::copy_n(ps, 4, a.out_partial_stride), std::copy_n(ls, 4, a.lse_partial_stride);
    a.out = o, a.lse = l;
    std::copy_n(o_stride, 3, a.out_stride);
    return a;
  }
  int64_t B, T, H, DV, S, ps[4], ls[4];
  std::vector<float> out, lse;
};

TEST(Combine, RebuildsTheAttentionOverAllKeys) {
  const std::vector<std::vector<int64_t>> cut_sets = {{}, {40}, {1, 1, 70}, {17, 50, 64, 64, 99}};
  for (const auto &cuts : cut_sets)
    for (bool split_major : {true, false})
      for (flashbox_dtype t : {FLASHBOX_FLOAT32, FLASHBOX_BFLOAT16}) {
        AttentionCase c;
        c.batch = 2, c.seqlen_q = 17, c.seqlen_k = 100, c.heads_q = 4, c.heads_kv = 2, c.head_dim = 32;
        c.head_dim_v = 48;
        AttentionData d(c);  // fp32 inputs; `t` is the combine's output dtype
        SCOPED_TRACE(d.name() + " cuts " + std::to_string(cuts.size()) + (split_major ? " split-major" : " batch-major") +
                     " out " + flashbox::cpu::dtype_name(t));
        const Partials p(d, cuts, split_major);
        const int64_t es = flashbox::cpu::dtype_size(t);
        std::vector<uint8_t> o(size_t(2 * 17 * 4 * 48 * es), 0xff);
        std::vector<float> lse(size_t(2 * 4 * 17), kNan);
        const int64_t o_stride[3] = {17 * 4 * 48, 4 * 48, 48};
        const flashbox_combine_args a = p.args(o.data(), o_stride, t, lse.data());
        ASSERT_EQ(flashbox_attention_combine(&a), FLASHBOX_OK) << flashbox_last_error();
        std::vector<double> got(size_t(2 * 17 * 4 * 48));
        for (size_t i = 0; i < got.size(); ++i) got[i] = flashbox::cpu::load_as_float(o.data(), t, int64_t(i));
        const auto r = flashbox::test::rel_error(got, d.reference_out());
        EXPECT_LT(r.rel_or_inf(), t == FLASHBOX_FLOAT32 ? 1e-5 : 1e-2) << "max abs error " << r.max_abs;
        double lse_err = 0;
        for (size_t i = 0; i < lse.size(); ++i) lse_err = std::max(lse_err, std::abs(lse[i] - d.reference_lse()[i]));
        EXPECT_LT(lse_err, 1e-4);  // NaN fails too
      }
}

TEST(Combine, RowsWithNoKeyInAnyPart) {
  // Every part of row (b 0, token 1, head 0) is -inf (their outputs NaN): O = 0 and LSE = -inf there,
  // the other rows unchanged.
  AttentionCase c;
  c.batch = 1, c.seqlen_q = 3, c.seqlen_k = 20, c.heads_q = 2, c.heads_kv = 2, c.head_dim = 8;
  AttentionData d(c);
  Partials p(d, {5, 12}, true);
  for (int64_t s = 0; s < p.S; ++s) {
    p.lse[size_t(s * p.ls[0] + 1 * p.ls[2])] = -std::numeric_limits<float>::infinity();
    for (int64_t x = 0; x < p.DV; ++x) p.out[size_t(s * p.ps[0] + 1 * p.ps[2] + x)] = kNan;
  }
  std::vector<float> o(size_t(3 * 2 * 8), kNan), lse(size_t(2 * 3), kNan);
  const int64_t o_stride[3] = {3 * 2 * 8, 2 * 8, 8};
  const flashbox_combine_args a = p.args(o.data(), o_stride, FLASHBOX_FLOAT32, lse.data());
  ASSERT_EQ(flashbox_attention_combine(&a), FLASHBOX_OK) << flashbox_last_error();
  for (int64_t x = 0; x < 8; ++x) EXPECT_EQ(o[size_t(1 * 16 + x)], 0.0f);
  EXPECT_EQ(lse[1], -std::numeric_limits<float>::infinity());  // [batch 0, head 0, token 1]
  EXPECT_NEAR(lse[0], d.reference_lse()[0], 1e-4);
  EXPECT_NEAR(o[16 + 8], d.reference_out()[16 + 8], 1e-5);  // token 1, head 1
}

TEST(CombineArgs, BadArgumentsWriteNothing) {
  AttentionCase c;
  c.batch = 1, c.seqlen_q = 5, c.seqlen_k = 20, c.heads_q = 2, c.heads_kv = 2, c.head_dim = 8;
  AttentionData d(c);
  Partials p(d, {7}, true);
  std::vector<float> o(size_t(5 * 2 * 8), kNan), lse(size_t(2 * 5), kNan);
  const int64_t o_stride[3] = {5 * 2 * 8, 2 * 8, 8};
  auto refused = [&](flashbox_combine_args a, int code, const std::string &mention) {
    EXPECT_EQ(flashbox_attention_combine(&a), code) << flashbox_last_error();
    EXPECT_NE(std::string(flashbox_last_error()).find(mention), std::string::npos) << flashbox_last_error();
    for (float x : o) EXPECT_TRUE(std::isnan(x)) << "out written";
    for (float x : lse) EXPECT_TRUE(std::isnan(x)) << "lse written";
  };
  const flashbox_combine_args ok = p.args(o.data(), o_stride, FLASHBOX_FLOAT32, lse.data());
  EXPECT_EQ(flashbox_attention_combine(nullptr), FLASHBOX_ERR_NULL_POINTER);
  auto a = ok;
  a.struct_size = 8;
  refused(a, FLASHBOX_ERR_INVALID_ARGUMENT, "struct_size = 8");
  a = ok, a.num_splits = 0;
  refused(a, FLASHBOX_ERR_INVALID_SIZE, "num_splits = 0");
  a = ok, a.out_partial = nullptr;
  refused(a, FLASHBOX_ERR_NULL_POINTER, "out_partial is NULL");
  a = ok, a.lse_partial_stride[2] = 0;
  refused(a, FLASHBOX_ERR_BAD_STRIDE, "lse_partial_stride[2] = 0");
  a = ok;
  const int bad_dtype = 9;  // as a C caller may pass it (not a value of the C++ enum)
  std::memcpy(&a.out_dtype, &bad_dtype, sizeof bad_dtype);
  refused(a, FLASHBOX_ERR_UNSUPPORTED_DTYPE, "out_dtype = 9");
  a = ok, a.out = const_cast<float *>(p.out.data());  // the output on top of an input
  refused(a, FLASHBOX_ERR_INVALID_ARGUMENT, "out overlaps out_partial");
  a = ok, a.lse = o.data();
  refused(a, FLASHBOX_ERR_INVALID_ARGUMENT, "out overlaps lse");
  // device = cuda with these host buffers: no device (a CPU-only build or machine) or host memory.
  a = ok, a.device = FLASHBOX_CUDA;
  refused(a, flashbox_cuda_device_count() > 0 ? FLASHBOX_ERR_INVALID_ARGUMENT : FLASHBOX_ERR_NO_DEVICE,
          flashbox_cuda_device_count() > 0 ? "host memory" : "device = cuda");
}

}  // namespace
