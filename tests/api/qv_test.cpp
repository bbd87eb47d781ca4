// flashbox_attention_ext.qv: a second query against V (FlashAttention-3's qv; MLA's absorbed decode,
// head_dim 64 + head_dim_v 512 with one latent KV head), scores = scale (q . k + qv . v). The CPU
// forward (naive and blocked, fp32 and bf16, GQA/MQA, causal, seqlen_q != seqlen_k, variable length)
// against the fp64 reference that adds the qv term itself, on fresh seeded data with poisoned
// outputs; the default scale 1/sqrt(head_dim + head_dim_v); bad input, the backward and what the CUDA
// explicit forward does not take refused with nothing written (tests/cuda/explicit_forward_test.cpp
// runs qv on the GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "support/attention_case.hpp"
#include "support/output_error.hpp"

using flashbox::test::AttentionCase;
using flashbox::test::AttentionData;
using flashbox::test::Layout;

namespace {

flashbox_attention_ext qv_ext(AttentionData &d) {
  flashbox_attention_ext e = flashbox_attention_ext_default();
  e.head_dim_v = d.dv();
  e.qv = d.qv_bytes().data();
  std::copy_n(d.qv_shape().stride, 3, e.qv_stride);
  return e;
}

void run_and_check(const AttentionCase &c) {
  AttentionData d(c);
  SCOPED_TRACE(std::string(flashbox_impl_name(c.impl)) + " " + d.name());
  const flashbox_attention_ext e = qv_ext(d);
  ASSERT_EQ(flashbox_attention_forward_ext(&d.args, &e), FLASHBOX_OK) << flashbox_last_error();
  EXPECT_NE(std::string(flashbox_last_kernel()).find("_qv"), std::string::npos) << flashbox_last_kernel();
  const auto r = d.compare();
  EXPECT_FALSE(r.has_nan);
  EXPECT_LT(r.rel_error, d.tolerance()) << "max abs error " << r.max_abs_error;
  EXPECT_LT(r.lse_max_abs_error, d.lse_tolerance());
  EXPECT_TRUE(d.o_padding_untouched());
}

class Qv : public ::testing::TestWithParam<flashbox_impl> {};

struct Dims {
  int64_t d, dv, heads_q, heads_kv;
};
// MLA decode (64 + 512, one KV head, 16 query heads), DeepSeek's prefill dims, equal dims, small.
constexpr Dims kDims[] = {{64, 512, 16, 1}, {192, 128, 4, 2}, {32, 32, 4, 4}, {16, 48, 6, 2}};

TEST_P(Qv, Fp32AgainstReference) {
  const std::pair<int64_t, int64_t> lengths[] = {{1, 1}, {1, 65}, {17, 17}, {17, 65}, {65, 17}};
  for (const Dims &dims : kDims)
    for (const auto &[sq, sk] : lengths)
      for (int causal : {0, 1}) {
        AttentionCase c;
        c.impl = GetParam(), c.batch = 2, c.seqlen_q = sq, c.seqlen_k = sk, c.heads_q = dims.heads_q;
        c.heads_kv = dims.heads_kv, c.head_dim = dims.d, c.head_dim_v = dims.dv, c.causal = causal, c.qv = true;
        c.layout = causal ? Layout::BHTD : Layout::PADDED;
        run_and_check(c);
      }
}

TEST_P(Qv, Bf16AndExplicitScale) {
  for (const Dims &dims : kDims)
    for (float scale : {0.0f, 0.05f}) {
      AttentionCase c;
      c.impl = GetParam(), c.batch = 1, c.seqlen_q = 33, c.seqlen_k = 70, c.heads_q = dims.heads_q;
      c.heads_kv = dims.heads_kv, c.head_dim = dims.d, c.head_dim_v = dims.dv, c.causal = 1, c.qv = true;
      c.dtype = FLASHBOX_BFLOAT16, c.softmax_scale = scale;
      run_and_check(c);
    }
}

INSTANTIATE_TEST_SUITE_P(Cpu, Qv, ::testing::Values(FLASHBOX_NAIVE, FLASHBOX_BLOCKED),
                         [](const auto &info) { return std::string(flashbox_impl_name(info.param)); });

TEST(QvScale, DefaultIsOneOverSqrtOfBothHeadDims) {
  // softmax_scale 0 with qv is 1/sqrt(head_dim + head_dim_v): the same bytes as that scale given.
  AttentionCase c;
  c.impl = FLASHBOX_BLOCKED, c.seqlen_q = 17, c.seqlen_k = 40, c.head_dim = 16, c.head_dim_v = 48, c.qv = true;
  AttentionData d(c);
  const flashbox_attention_ext e = qv_ext(d);
  ASSERT_EQ(flashbox_attention_forward_ext(&d.args, &e), FLASHBOX_OK) << flashbox_last_error();
  const std::vector<uint8_t> by_default = d.o_bytes();
  d.poison();
  flashbox_attention_args a = d.args;
  a.softmax_scale = float(1.0 / std::sqrt(64.0));
  ASSERT_EQ(flashbox_attention_forward_ext(&a, &e), FLASHBOX_OK) << flashbox_last_error();
  EXPECT_TRUE(by_default == d.o_bytes());
}

TEST(QvVarlen, PackedSequencesMatchTheirOwnCalls) {
  // cu_seqlens over packed tensors (a sequence with no key and one with no query): each sequence's
  // rows equal a fixed-length qv call on that sequence alone.
  const std::vector<int32_t> lens_q = {5, 0, 9, 3}, lens_k = {7, 3, 12, 0};
  std::vector<int32_t> cu_q = {0}, cu_k = {0};
  for (size_t s = 0; s < lens_q.size(); ++s) cu_q.push_back(cu_q.back() + lens_q[s]);
  for (size_t s = 0; s < lens_k.size(); ++s) cu_k.push_back(cu_k.back() + lens_k[s]);
  AttentionCase c;
  c.impl = FLASHBOX_BLOCKED, c.seqlen_q = cu_q.back(), c.seqlen_k = cu_k.back(), c.heads_q = 4, c.heads_kv = 1;
  c.head_dim = 16, c.head_dim_v = 32, c.causal = 1, c.qv = true;
  AttentionData all(c);
  flashbox_attention_args a = all.args;
  a.batch = int64_t(lens_q.size());
  flashbox_attention_ext e = qv_ext(all);
  e.cu_seqlens_q = cu_q.data(), e.cu_seqlens_k = cu_k.data(), e.max_seqlen_q = 9, e.max_seqlen_k = 12;
  ASSERT_EQ(flashbox_attention_forward_ext(&a, &e), FLASHBOX_OK) << flashbox_last_error();
  const std::vector<double> packed = all.output_dense();  // [1, total_q, 4, 32]
  const int64_t row = 4 * 32, es = 4;
  for (size_t s = 0; s < lens_q.size(); ++s) {
    if (lens_q[s] == 0) continue;
    SCOPED_TRACE("sequence " + std::to_string(s));
    std::vector<double> want;
    if (lens_k[s] == 0) {
      want.assign(size_t(lens_q[s] * row), 0.0);
    } else {
      flashbox_attention_args x = all.args;
      x.seqlen_q = lens_q[s], x.seqlen_k = lens_k[s];
      x.q = static_cast<const char *>(x.q) + cu_q[s] * x.q_stride[1] * es;
      x.k = static_cast<const char *>(x.k) + cu_k[s] * x.k_stride[1] * es;
      x.v = static_cast<const char *>(x.v) + cu_k[s] * x.v_stride[1] * es;
      const flashbox::cpu::QvInput qv{all.qv_bytes().data() + cu_q[s] * all.qv_shape().stride[1] * es,
                                      all.qv_shape().stride};
      flashbox::cpu::reference_attention_fp64(x, want, nullptr, nullptr, 32, &qv);
    }
    const std::vector<double> got(packed.begin() + cu_q[s] * row, packed.begin() + cu_q[s + 1] * row);
    const auto r = flashbox::test::rel_error(got, want);
    EXPECT_LT(r.rel_or_inf(), 1e-5) << "max abs error " << r.max_abs;
  }
}

// A refusal: the code, every phrase in the message, nothing written to o or lse.
void expect_refused(AttentionData &d, const flashbox_attention_args &a, const flashbox_attention_ext &e, int code,
                    const std::vector<std::string> &mentions) {
  d.poison();
  const std::vector<uint8_t> before = d.o_bytes();
  EXPECT_EQ(flashbox_attention_forward_ext(&a, &e), code) << flashbox_last_error();
  const std::string msg = flashbox_last_error();
  for (const std::string &m : mentions) EXPECT_NE(msg.find(m), std::string::npos) << "'" << m << "' not in: " << msg;
  EXPECT_TRUE(before == d.o_bytes()) << "a refused call wrote o";
  EXPECT_TRUE(std::all_of(d.lse.begin(), d.lse.end(), [](float x) { return std::isnan(x); })) << "lse written";
}

TEST(QvArgs, BadInputIsRefused) {
  AttentionCase c;
  c.seqlen_q = 17, c.seqlen_k = 17, c.heads_q = 4, c.heads_kv = 2, c.head_dim = 64, c.head_dim_v = 128, c.qv = true;
  AttentionData d(c);
  {
    SCOPED_TRACE("stride 0");
    flashbox_attention_ext e = qv_ext(d);
    e.qv_stride[1] = 0;
    expect_refused(d, d.args, e, FLASHBOX_ERR_BAD_STRIDE, {"qv_stride"});
  }
  {
    SCOPED_TRACE("qv overlapping o");
    flashbox_attention_ext e = qv_ext(d);
    e.qv = d.o_bytes().data();
    std::copy_n(d.o_shape().stride, 3, e.qv_stride);
    expect_refused(d, d.args, e, FLASHBOX_ERR_INVALID_ARGUMENT, {"overlaps qv"});
  }
  {
    SCOPED_TRACE("head_dim + head_dim_v above the cpu's limit");
    AttentionCase big = c;
    big.head_dim = 128, big.head_dim_v = 512;
    AttentionData db(big);
    expect_refused(db, db.args, qv_ext(db), FLASHBOX_ERR_UNSUPPORTED_HEAD_DIM,
                   {"head_dim = 128", "head_dim_v = 512", "at most 576"});
  }
  // device = cuda runs qv on the explicit forward; what it does not take is refused before any
  // device check (these run on machines without a GPU too).
  for (const int64_t dv : {int64_t(520), int64_t(100)}) {
    SCOPED_TRACE("cuda, head_dim_v = " + std::to_string(dv));
    AttentionCase odd = c;
    odd.head_dim_v = dv, odd.dtype = FLASHBOX_BFLOAT16;
    AttentionData dd(odd);
    flashbox_attention_args a = dd.args;
    a.device = FLASHBOX_CUDA;
    expect_refused(dd, a, qv_ext(dd), FLASHBOX_ERR_UNSUPPORTED_HEAD_DIM,
                   {"head_dim_v = " + std::to_string(dv), "explicit forward", "up to 512"});
  }
  {
    SCOPED_TRACE("cuda, with document ids");
    AttentionCase same = c;
    same.dtype = FLASHBOX_BFLOAT16;
    AttentionData ds(same);
    flashbox_attention_args a = ds.args;
    a.device = FLASHBOX_CUDA;
    const std::vector<int32_t> ids(size_t(ds.args.batch * 17), 0);
    flashbox_attention_ext e = qv_ext(ds);
    e.document_ids_q = e.document_ids_k = ids.data();
    expect_refused(ds, a, e, FLASHBOX_ERR_UNSUPPORTED_IMPL, {"qv with document_ids", "device = cuda"});
  }
}

TEST(QvArgs, BackwardRefusesIt) {
  AttentionCase c;
  c.seqlen_q = 17, c.seqlen_k = 17, c.head_dim = 32, c.head_dim_v = 32, c.qv = true;
  AttentionData d(c);
  std::vector<uint8_t> dout(d.o_bytes().size(), 0), dq(d.q_bytes().size(), 0x5a), dk(d.k_bytes().size(), 0x5a),
      dv(d.v_bytes().size(), 0x5a);
  flashbox_attention_grad_args g{};
  g.fwd = d.args;
  g.dout = dout.data(), g.dq = dq.data(), g.dk = dk.data(), g.dv = dv.data();
  std::copy_n(d.o_shape().stride, 3, g.dout_stride), std::copy_n(d.q_shape().stride, 3, g.dq_stride);
  std::copy_n(d.k_shape().stride, 3, g.dk_stride), std::copy_n(d.v_shape().stride, 3, g.dv_stride);
  const flashbox_attention_ext e = qv_ext(d);
  EXPECT_EQ(flashbox_attention_backward_ext(&g, &e), FLASHBOX_ERR_UNSUPPORTED_IMPL);
  EXPECT_NE(std::string(flashbox_last_error()).find("backward takes no qv"), std::string::npos) << flashbox_last_error();
  EXPECT_TRUE(std::all_of(dq.begin(), dq.end(), [](uint8_t b) { return b == 0x5a; })) << "dq written";
}

TEST(QvArgs, StructWithoutItReadsItAsNull) {
  // A caller compiled before qv: struct_size ends at seqused_k, and a qv pointer past it is never read.
  AttentionCase c;
  c.impl = FLASHBOX_BLOCKED, c.seqlen_q = 17, c.seqlen_k = 30, c.head_dim = 32, c.qv = true;
  AttentionData d(c);
  flashbox_attention_ext e = qv_ext(d);
  e.struct_size = int32_t(offsetof(flashbox_attention_ext, qv));
  ASSERT_EQ(flashbox_attention_forward_ext(&d.args, &e), FLASHBOX_OK) << flashbox_last_error();
  const auto ref_without_qv = [&] {
    std::vector<double> out;
    flashbox::cpu::reference_attention_fp64(d.args, out, nullptr);
    return out;
  }();
  const auto r = flashbox::test::rel_error(d.output_dense(), ref_without_qv);
  EXPECT_LT(r.rel_or_inf(), 1e-5) << "the qv past struct_size was read";
}

}  // namespace
