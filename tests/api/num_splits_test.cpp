// flashbox_attention_ext.num_splits with out_partial / lse_partial on the CPU: the split forward's o
// and lse equal the one-part forward's (fp32: to rounding; bf16: to the dtype's tolerance), every part
// equals the fp64 reference on its key range (causal, windows, GQA, fixed and variable length, a part
// with no key for some rows), flashbox_attention_combine of the caller's parts gives o again; bad
// values, the backward, CUDA and overlapping buffers refused with nothing written.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "support/mask_case.hpp"
#include "support/output_error.hpp"
#include "support/sanitizer_build.hpp"

using flashbox::test::MaskCase;
using flashbox::test::MaskData;

namespace {

struct Parts {
  std::vector<float> o, lse;
};

// Forward with `splits` parts; the o and lse it writes, and its partial outputs.
Parts run_split(MaskData &d, int64_t splits, flashbox_impl impl) {
  const MaskCase &c = d.config();
  const int64_t rows = c.varlen() ? c.seqlen_q : c.batch * c.seqlen_q;
  Parts p;
  p.o.assign(size_t(splits * rows * c.heads_q * c.head_dim), std::numeric_limits<float>::quiet_NaN());
  p.lse.assign(size_t(splits * rows * c.heads_q), std::numeric_limits<float>::quiet_NaN());
  const flashbox_attention_args a = d.forward_args(impl);
  flashbox_attention_ext e = d.ext();
  e.num_splits = splits, e.out_partial = p.o.data(), e.lse_partial = p.lse.data();
  EXPECT_EQ(flashbox_attention_forward_ext(&a, &e), FLASHBOX_OK) << flashbox_last_error();
  return p;
}

TEST(NumSplits, SameAttentionAsOnePart) {
  struct Case {
    int64_t sq, sk;
    int causal;
    int32_t left;
    std::vector<int32_t> lens_q, lens_k;
  };
  const Case cases[] = {{40, 100, 0, -1, {}, {}},  {100, 100, 1, -1, {}, {}}, {17, 65, 1, 9, {}, {}},
                        {1, 33, 0, -1, {}, {}},    {0, 0, 1, -1, {5, 0, 40, 3}, {7, 2, 70, 0}}};
  // The sanitizer build (support/sanitizer_build.hpp) takes one dtype per (case, splits), alternating:
  // each case and each split count still meets both.
  const int64_t split_counts[] = {2, 3, 7};
  for (size_t ki = 0; ki < std::size(cases); ++ki)
    for (size_t si = 0; si < std::size(split_counts); ++si)
      for (flashbox_dtype t : {FLASHBOX_FLOAT32, FLASHBOX_BFLOAT16})
        for (flashbox_impl impl : {FLASHBOX_NAIVE, FLASHBOX_BLOCKED}) {
          if (flashbox::test::kSanitizerBuild && (t == FLASHBOX_BFLOAT16) != bool((ki + si) % 2)) continue;
          const Case &k = cases[ki];
          const int64_t splits = split_counts[si];
          MaskCase c;
          c.seqlen_q = k.sq, c.seqlen_k = k.sk, c.causal = k.causal, c.window_left = k.left, c.lens_q = k.lens_q;
          c.lens_k = k.lens_k, c.heads_q = 4, c.heads_kv = 2, c.dtype = t;
          MaskData d(c);
          SCOPED_TRACE(d.name() + " splits " + std::to_string(splits) + " " + flashbox_impl_name(impl));
          run_split(d, splits, impl);
          EXPECT_NE(std::string(flashbox_last_kernel()).find("_split" + std::to_string(splits)), std::string::npos)
              << flashbox_last_kernel();
          const auto o = d.o_error();
          EXPECT_FALSE(o.nan);
          EXPECT_LT(o.rel, d.tolerance());
          EXPECT_LT(d.lse_error(), t == FLASHBOX_FLOAT32 ? 1e-4 : 1e-3);
        }
}

TEST(NumSplits, PartsAreTheirKeyRangesAndCombineBack) {
  // Fixed length, fp32: part s covers keys [s * 25, s * 25 + 25) of 100 (4 parts); against the fp64
  // reference of that range (non-causal, so the range alone decides), then combined by the public call.
  MaskCase c;
  c.batch = 2, c.seqlen_q = 9, c.seqlen_k = 100, c.heads_q = 2, c.heads_kv = 1, c.head_dim = 16;
  MaskData d(c);
  const flashbox_attention_args a = d.forward_args(FLASHBOX_BLOCKED);  // q, k, v for the references
  const Parts p = run_split(d, 4, FLASHBOX_BLOCKED);
  const int64_t HQ = 2, D = 16, T = 9;
  for (int64_t s = 0; s < 4; ++s) {
    flashbox_attention_args r = a;
    r.seqlen_k = 25;
    r.k = static_cast<const float *>(a.k) + s * 25 * a.k_stride[1];
    r.v = static_cast<const float *>(a.v) + s * 25 * a.v_stride[1];
    std::vector<double> ref, ref_lse;
    flashbox::cpu::reference_attention_fp64(r, ref, &ref_lse);
    const std::vector<double> got(p.o.begin() + s * 2 * T * HQ * D, p.o.begin() + (s + 1) * 2 * T * HQ * D);
    EXPECT_LT(flashbox::test::rel_error(got, ref).rel_or_inf(), 1e-5) << "part " << s;
    for (size_t i = 0; i < ref_lse.size(); ++i)
      EXPECT_NEAR(p.lse[size_t(s) * ref_lse.size() + i], ref_lse[i], 1e-4) << "part " << s << " lse " << i;
  }
  std::vector<float> o(size_t(2 * T * HQ * D), NAN), lse(size_t(2 * HQ * T), NAN);
  flashbox_combine_args cb{};
  cb.struct_size = int32_t(sizeof cb), cb.device = FLASHBOX_CPU, cb.out_dtype = FLASHBOX_FLOAT32;
  cb.num_splits = 4, cb.batch = 2, cb.seqlen = T, cb.heads = HQ, cb.head_dim_v = D;
  cb.out_partial = p.o.data(), cb.lse_partial = p.lse.data();
  const int64_t ps[4] = {2 * T * HQ * D, T * HQ * D, HQ * D, D}, ls[4] = {2 * HQ * T, HQ * T, 1, T};
  std::copy_n(ps, 4, cb.out_partial_stride), std::copy_n(ls, 4, cb.lse_partial_stride);
  cb.out = o.data(), cb.lse = lse.data();
  const int64_t os[3] = {T * HQ * D, HQ * D, D};
  std::copy_n(os, 3, cb.out_stride);
  ASSERT_EQ(flashbox_attention_combine(&cb), FLASHBOX_OK) << flashbox_last_error();
  EXPECT_EQ(0, std::memcmp(o.data(), d.o_bytes().data(), o.size() * 4)) << "the caller's combine differs from o";
  EXPECT_EQ(0, std::memcmp(lse.data(), d.lse().data(), lse.size() * 4)) << "the caller's combine differs from lse";
}

TEST(NumSplitsArgs, BadInputWritesNothing) {
  MaskCase c;
  c.seqlen_q = 9, c.seqlen_k = 30;
  MaskData d(c);
  std::vector<float> po(size_t(3 * 2 * 9 * 2 * 16)), pl(size_t(3 * 2 * 2 * 9));
  auto refused = [&](flashbox_attention_args a, flashbox_attention_ext e, int code, const std::string &mention) {
    const std::vector<uint8_t> before = d.outputs_snapshot();
    EXPECT_EQ(flashbox_attention_forward_ext(&a, &e), code) << flashbox_last_error();
    EXPECT_NE(std::string(flashbox_last_error()).find(mention), std::string::npos) << flashbox_last_error();
    EXPECT_TRUE(before == d.outputs_snapshot()) << "a refused call wrote o or lse";
  };
  const flashbox_attention_args a = d.forward_args(FLASHBOX_BLOCKED);
  flashbox_attention_ext e = d.ext();
  e.num_splits = 300;
  refused(a, e, FLASHBOX_ERR_INVALID_ARGUMENT, "num_splits = 300");
  e = d.ext(), e.num_splits = 3, e.out_partial = po.data();
  refused(a, e, FLASHBOX_ERR_NULL_POINTER, "lse_partial is NULL");
  e = d.ext(), e.num_splits = 1, e.out_partial = po.data(), e.lse_partial = pl.data();
  refused(a, e, FLASHBOX_ERR_INVALID_ARGUMENT, "need num_splits > 1");
  e = d.ext(), e.num_splits = 3, e.out_partial = po.data(), e.lse_partial = po.data() + 8;
  refused(a, e, FLASHBOX_ERR_INVALID_ARGUMENT, "overlaps");
  e = d.ext(), e.num_splits = 3, e.out_partial = reinterpret_cast<float *>(d.o_bytes().data());
  e.lse_partial = pl.data();
  refused(a, e, FLASHBOX_ERR_INVALID_ARGUMENT, "overlaps");
  flashbox_attention_args cuda = a;
  cuda.device = FLASHBOX_CUDA, cuda.dtype = FLASHBOX_BFLOAT16;
  e = d.ext(), e.num_splits = 2;
  refused(cuda, e, FLASHBOX_ERR_UNSUPPORTED_IMPL, "num_splits = 2: the CUDA kernels");
  std::vector<int32_t> used = {9, 9};
  e = d.ext(), e.num_splits = 2, e.seqused_q = used.data();
  refused(a, e, FLASHBOX_ERR_UNSUPPORTED_IMPL, "with seqused_q");
  flashbox_attention_grad_args g = d.grad_args(FLASHBOX_BLOCKED);
  e = d.ext(), e.num_splits = 2;
  EXPECT_EQ(flashbox_attention_backward_ext(&g, &e), FLASHBOX_ERR_UNSUPPORTED_IMPL);
  EXPECT_NE(std::string(flashbox_last_error()).find("backward takes no split"), std::string::npos) << flashbox_last_error();
}

}  // namespace
