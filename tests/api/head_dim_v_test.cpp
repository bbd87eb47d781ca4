// flashbox_attention_ext.head_dim_v: V and O with a head dim of their own (FlashAttention-3's hdim_v).
// The cpu forward (naive and blocked, every dtype, GQA, causal, strided layouts) against the fp64
// reference on fresh seeded data with poisoned outputs; head_dim_v = head_dim (given or 0) is exactly
// the plain call; an older struct_size (without the field) reads it as 0; bad values are refused with
// nothing written; cuda takes head_dim_v (no refusal names it; tests/cuda/head_dim_v_cuda_test.cpp
// runs it on a GPU). The cpu backward (naive and blocked, both deterministic modes)
// against the fp64 reference backward: dout and dv have rows of head_dim_v.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cpu/reference_backward_fp64.hpp"
#include "support/attention_case.hpp"
#include "support/output_error.hpp"
#include "support/sanitizer_build.hpp"

using flashbox::test::AttentionCase;
using flashbox::test::AttentionData;
using flashbox::test::Layout;

namespace {

struct Dims {
  int64_t d, dv;
};
// (192, 128): DeepSeek's MLA; (64, 256) and (16, 48): V wider than Q/K; (32, 16): narrower; (128,
// 128): the field given equal to head_dim.
constexpr Dims kDims[] = {{192, 128}, {64, 256}, {32, 16}, {16, 48}, {128, 128}};

flashbox_attention_ext ext_with(int64_t head_dim_v) {
  flashbox_attention_ext e = flashbox_attention_ext_default();
  e.head_dim_v = head_dim_v;
  return e;
}

std::string label(const AttentionCase &c, AttentionData &d) {
  return std::string(flashbox_impl_name(c.impl)) + " " + d.name();
}

// Runs the extension's forward with c.head_dim_v on fresh data and checks O and LSE against the fp64
// reference (O relative error below the dtype's tolerance, LSE absolute, NaN never passes) and that
// no byte of o outside its elements was written.
void run_and_check(const AttentionCase &c) {
  AttentionData d(c);
  SCOPED_TRACE(label(c, d));
  const flashbox_attention_ext e = ext_with(c.head_dim_v);
  ASSERT_EQ(flashbox_attention_forward_ext(&d.args, &e), FLASHBOX_OK) << flashbox_last_error();
  const auto r = d.compare();
  EXPECT_FALSE(r.has_nan);
  EXPECT_LT(r.rel_error, d.tolerance()) << "max abs error " << r.max_abs_error;
  EXPECT_LT(r.lse_max_abs_error, d.lse_tolerance());
  EXPECT_TRUE(d.o_padding_untouched()) << "o written outside its [.., heads_q, head_dim_v] elements";
}

class HeadDimV : public ::testing::TestWithParam<flashbox_impl> {};

TEST_P(HeadDimV, Fp32AgainstReference) {
  // seqlen_q x seqlen_k: equal, and both ways unequal (causal with seqlen_q > seqlen_k leaves the first
  // rows without a key: O = 0, LSE = -inf).
  // The sanitizer build runs one of the two layouts per (dims, lengths, causal), in turn.
  const std::pair<int64_t, int64_t> lengths[] = {{1, 1}, {1, 17}, {17, 17}, {17, 65}, {65, 65}, {65, 17}};
  for (size_t di = 0; di < std::size(kDims); ++di)
    for (size_t li = 0; li < std::size(lengths); ++li)
      for (int causal : {0, 1})
        for (Layout layout : {Layout::BTHD, Layout::BHTD}) {
          if (flashbox::test::kSanitizerBuild && (layout == Layout::BHTD) != bool((di + li + causal) % 2)) continue;
          const Dims &dims = kDims[di];
          const auto [sq, sk] = lengths[li];
          AttentionCase c;
          c.impl = GetParam(), c.batch = 2, c.seqlen_q = sq, c.seqlen_k = sk, c.heads_q = 4, c.heads_kv = 2;
          c.head_dim = dims.d, c.head_dim_v = dims.dv, c.causal = causal, c.layout = layout;
          run_and_check(c);
        }
}

TEST_P(HeadDimV, HalfPrecisionAgainstReference) {
  for (const Dims &dims : kDims)
    for (flashbox_dtype dtype : {FLASHBOX_BFLOAT16, FLASHBOX_FLOAT16})
      for (int causal : {0, 1}) {
        AttentionCase c;
        c.impl = GetParam(), c.batch = 1, c.seqlen_q = 65, c.seqlen_k = causal ? 65 : 17, c.heads_q = 4;
        c.heads_kv = 2, c.head_dim = dims.d, c.head_dim_v = dims.dv, c.causal = causal, c.dtype = dtype;
        c.layout = causal ? Layout::BHTD : Layout::BTHD;
        run_and_check(c);
      }
}

TEST_P(HeadDimV, PaddedLayoutAndScale) {
  // Gaps after every row: only the head_dim_v elements of each o row are written.
  for (const Dims &dims : kDims) {
    AttentionCase c;
    c.impl = GetParam(), c.batch = 2, c.seqlen_q = 17, c.seqlen_k = 65, c.heads_q = 4, c.heads_kv = 2;
    c.head_dim = dims.d, c.head_dim_v = dims.dv, c.layout = Layout::PADDED, c.softmax_scale = 0.3f;
    run_and_check(c);
  }
}

TEST_P(HeadDimV, VariableLengthBatch) {
  // cu_seqlens over packed [total, heads, dim] tensors, one sequence with no key and one with no
  // query; each sequence checked against the fixed-length reference of its rows.
  const int64_t d = 32, dv = 48, hq = 4, hkv = 2;
  const std::vector<int32_t> lens_q = {5, 0, 9, 3}, lens_k = {7, 3, 9, 0};
  std::vector<int32_t> cu_q = {0}, cu_k = {0};
  for (size_t s = 0; s < lens_q.size(); ++s) cu_q.push_back(cu_q.back() + lens_q[s]);
  for (size_t s = 0; s < lens_k.size(); ++s) cu_k.push_back(cu_k.back() + lens_k[s]);
  const int64_t tq = cu_q.back(), tk = cu_k.back();
  // One fixed-length case holds the packed tensors: batch 1, seqlen_q = total_q, seqlen_k = total_k.
  AttentionCase c;
  c.impl = GetParam(), c.batch = 1, c.seqlen_q = tq, c.seqlen_k = tk, c.heads_q = hq, c.heads_kv = hkv;
  c.head_dim = d, c.head_dim_v = dv, c.causal = 1;
  AttentionData d_all(c);
  SCOPED_TRACE(label(c, d_all));
  flashbox_attention_args a = d_all.args;
  a.batch = int64_t(lens_q.size());
  flashbox_attention_ext e = ext_with(dv);
  e.cu_seqlens_q = cu_q.data(), e.cu_seqlens_k = cu_k.data();
  e.max_seqlen_q = *std::max_element(lens_q.begin(), lens_q.end());
  e.max_seqlen_k = *std::max_element(lens_k.begin(), lens_k.end());
  ASSERT_EQ(flashbox_attention_forward_ext(&a, &e), FLASHBOX_OK) << flashbox_last_error();
  const std::vector<double> out = d_all.output_dense();  // [1, total_q, hq, dv]
  std::vector<double> got, want;
  for (size_t s = 0; s < lens_q.size(); ++s) {
    if (lens_q[s] == 0) continue;
    std::vector<double> ref, ref_lse;
    if (lens_k[s] == 0) {
      ref.assign(size_t(lens_q[s] * hq * dv), 0.0);  // no key: O = 0, LSE = -inf
      ref_lse.assign(size_t(hq * lens_q[s]), -INFINITY);
    } else {
      flashbox_attention_args x = a;
      x.batch = 1, x.seqlen_q = lens_q[s], x.seqlen_k = lens_k[s];
      const int64_t es = flashbox::cpu::dtype_size(a.dtype);
      x.q = static_cast<const char *>(a.q) + cu_q[s] * a.q_stride[1] * es;
      x.k = static_cast<const char *>(a.k) + cu_k[s] * a.k_stride[1] * es;
      x.v = static_cast<const char *>(a.v) + cu_k[s] * a.v_stride[1] * es;
      flashbox::cpu::reference_attention_fp64(x, ref, &ref_lse, nullptr, dv);
    }
    got.insert(got.end(), out.begin() + cu_q[s] * hq * dv, out.begin() + cu_q[s + 1] * hq * dv);
    want.insert(want.end(), ref.begin(), ref.end());
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t i = 0; i < lens_q[s]; ++i) {
        const double l = d_all.lse[size_t(h * tq + cu_q[s] + i)], rl = ref_lse[size_t(h * lens_q[s] + i)];
        if (std::isinf(rl)) {
          EXPECT_EQ(l, rl) << "sequence " << s << " head " << h << " row " << i;
        } else {
          EXPECT_LT(std::abs(l - rl), 1e-4) << "sequence " << s << " head " << h << " row " << i;
        }
      }
  }
  const auto r = flashbox::test::rel_error(got, want);
  EXPECT_LT(r.rel_or_inf(), 1e-5) << "max abs error " << r.max_abs;
}

INSTANTIATE_TEST_SUITE_P(Cpu, HeadDimV, ::testing::Values(FLASHBOX_NAIVE, FLASHBOX_BLOCKED, FLASHBOX_AUTO),
                         [](const auto &info) { return std::string(flashbox_impl_name(info.param)); });

// o's and lse's bytes, to tell that a call wrote nothing.
std::vector<uint8_t> outputs_of(AttentionData &d) {
  std::vector<uint8_t> bytes = d.o_bytes();
  const auto *l = reinterpret_cast<const uint8_t *>(d.lse.data());
  bytes.insert(bytes.end(), l, l + d.lse.size() * sizeof(float));
  return bytes;
}

TEST(HeadDimVEqual, GivenOrZeroIsThePlainCall) {
  // head_dim_v = head_dim, given explicitly or as 0, runs the plain call: the same kernel and the same
  // bytes, with and without an extension field that takes the extension's own path (a window).
  for (flashbox_impl impl : {FLASHBOX_NAIVE, FLASHBOX_BLOCKED})
    for (int64_t window_left : {-1, 5}) {
      AttentionCase c;
      c.impl = impl, c.seqlen_q = 65, c.seqlen_k = 33, c.heads_q = 4, c.heads_kv = 2, c.head_dim = 128;
      c.causal = 1, c.layout = Layout::BHTD;
      AttentionData d(c);
      SCOPED_TRACE(label(c, d) + " window_left " + std::to_string(window_left));
      flashbox_attention_ext zero = ext_with(0);
      zero.window_left = int32_t(window_left);
      ASSERT_EQ(flashbox_attention_forward_ext(&d.args, &zero), FLASHBOX_OK) << flashbox_last_error();
      const std::string kernel_zero = flashbox_last_kernel();
      const std::vector<uint8_t> plain = outputs_of(d);
      d.poison();
      flashbox_attention_ext given = ext_with(128);
      given.window_left = int32_t(window_left);
      ASSERT_EQ(flashbox_attention_forward_ext(&d.args, &given), FLASHBOX_OK) << flashbox_last_error();
      EXPECT_EQ(kernel_zero, flashbox_last_kernel());
      EXPECT_TRUE(plain == outputs_of(d)) << "head_dim_v = head_dim differs from head_dim_v = 0";
      if (window_left < 0) {  // and both are the plain entry point's result
        d.poison();
        ASSERT_EQ(flashbox_attention_forward(&d.args), FLASHBOX_OK) << flashbox_last_error();
        EXPECT_TRUE(plain == outputs_of(d)) << "head_dim_v = head_dim differs from flashbox_attention_forward";
      }
      // The backward takes head_dim_v = head_dim given explicitly.
      const int64_t n = int64_t(d.q_bytes().size());
      std::vector<uint8_t> dout(size_t(n), 0), dq(size_t(n), 0), dk(d.k_bytes().size(), 0), dv(d.v_bytes().size(), 0);
      flashbox_attention_grad_args g{};
      g.fwd = d.args;
      g.dout = dout.data(), g.dq = dq.data(), g.dk = dk.data(), g.dv = dv.data();
      std::copy_n(d.q_shape().stride, 3, g.dout_stride), std::copy_n(d.q_shape().stride, 3, g.dq_stride);
      std::copy_n(d.k_shape().stride, 3, g.dk_stride), std::copy_n(d.v_shape().stride, 3, g.dv_stride);
      EXPECT_EQ(flashbox_attention_backward_ext(&g, &given), FLASHBOX_OK) << flashbox_last_error();
    }
}

TEST(HeadDimVEqual, OlderStructSizeReadsItAsZero) {
  // A caller compiled before head_dim_v: struct_size ends before it, and whatever the bytes after
  // hold is never read. With a window (the extension's own path) the result is the current struct's
  // with head_dim_v = 0, byte for byte.
  AttentionCase c;
  c.impl = FLASHBOX_BLOCKED, c.seqlen_q = 17, c.seqlen_k = 65, c.heads_q = 4, c.heads_kv = 2, c.head_dim = 32;
  AttentionData d(c);
  SCOPED_TRACE(d.name());
  flashbox_attention_ext now = ext_with(0);
  now.window_left = 7;
  ASSERT_EQ(flashbox_attention_forward_ext(&d.args, &now), FLASHBOX_OK) << flashbox_last_error();
  const std::vector<uint8_t> expected = outputs_of(d);
  d.poison();
  flashbox_attention_ext old = now;
  old.struct_size = int32_t(offsetof(flashbox_attention_ext, head_dim_v));
  old.head_dim_v = 48;  // past the old struct: must not be read (it would change o's row length)
  ASSERT_EQ(flashbox_attention_forward_ext(&d.args, &old), FLASHBOX_OK) << flashbox_last_error();
  EXPECT_TRUE(expected == outputs_of(d)) << "an older struct_size did not behave as head_dim_v = 0";
  // Without any other field it is the plain call.
  d.poison();
  flashbox_attention_ext old_off = ext_with(48);
  old_off.struct_size = int32_t(offsetof(flashbox_attention_ext, head_dim_v));
  ASSERT_EQ(flashbox_attention_forward_ext(&d.args, &old_off), FLASHBOX_OK) << flashbox_last_error();
  const auto r = d.compare();
  EXPECT_LT(r.rel_error, d.tolerance());
  // A size that ends inside head_dim_v is neither struct.
  flashbox_attention_ext torn = ext_with(0);
  torn.struct_size = int32_t(offsetof(flashbox_attention_ext, head_dim_v) + 4);
  d.poison();
  const std::vector<uint8_t> before = outputs_of(d);
  EXPECT_EQ(flashbox_attention_forward_ext(&d.args, &torn), FLASHBOX_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashbox_last_error()).find("ends inside a field"), std::string::npos)
      << flashbox_last_error();
  EXPECT_TRUE(before == outputs_of(d));
}

TEST(HeadDimVScratch, BlockedTilesSizedByHeadDimV) {
  // The blocked level's scratch is per-thread tiles: the same at every sequence length, and its V and
  // accumulator tiles follow head_dim_v (a narrower V needs less than a wider one). Both lengths give
  // at least 256 (batch, head, query block) tasks, so every thread of a machine with up to 256 is busy
  // at both; S at the longer one (B * 16 heads * T^2 fp32) is larger than 256 threads' tiles. The
  // sanitizer build's shapes (support/sanitizer_build.hpp) keep both properties with less than half the work.
  constexpr int64_t B = flashbox::test::unless_sanitized<int64_t>(2, 4);
  constexpr int64_t short_t = flashbox::test::unless_sanitized<int64_t>(512, 256);
  constexpr int64_t long_t = flashbox::test::unless_sanitized<int64_t>(1000, 448);
  auto peak = [](int64_t t, int64_t d, int64_t dv) {
    AttentionCase c;
    c.impl = FLASHBOX_BLOCKED, c.batch = B, c.seqlen_q = t, c.seqlen_k = t, c.heads_q = 16, c.heads_kv = 2;
    c.head_dim = d, c.head_dim_v = dv;
    AttentionData d_(c);
    const flashbox_attention_ext e = ext_with(dv);
    EXPECT_EQ(flashbox_attention_forward_ext(&d_.args, &e), FLASHBOX_OK) << flashbox_last_error();
    return flashbox_last_scratch_peak_bytes();
  };
  const int64_t small = peak(short_t, 64, 256), large = peak(long_t, 64, 256);
  EXPECT_EQ(small, large) << "blocked must only hold per-thread tiles, independent of T";
  EXPECT_LT(large, B * 16 * long_t * long_t * 4) << "blocked must not hold anything the size of S";
  EXPECT_LT(peak(short_t, 64, 16), small) << "V and accumulator tiles must be sized by head_dim_v";
  EXPECT_LT(peak(short_t, 16, 256), small) << "Q and K tiles must be sized by head_dim";
}

// A refusal: the code, every phrase in the message, nothing written to o or lse.
void expect_refused(AttentionData &d, const flashbox_attention_args &a, const flashbox_attention_ext &e, int code,
                    const std::vector<std::string> &mentions) {
  const std::vector<uint8_t> before = outputs_of(d);
  EXPECT_EQ(flashbox_attention_forward_ext(&a, &e), code) << flashbox_last_error();
  const std::string msg = flashbox_last_error();
  for (const std::string &m : mentions) EXPECT_NE(msg.find(m), std::string::npos) << "'" << m << "' not in: " << msg;
  EXPECT_TRUE(before == outputs_of(d)) << "a refused call wrote an output";
}

TEST(HeadDimVArgs, BadValuesAreNamed) {
  AttentionCase c;
  c.seqlen_q = 17, c.seqlen_k = 17, c.heads_q = 4, c.heads_kv = 2, c.head_dim = 64, c.head_dim_v = 128;
  AttentionData d(c);
  {
    SCOPED_TRACE("negative");
    expect_refused(d, d.args, ext_with(-1), FLASHBOX_ERR_INVALID_SIZE, {"head_dim_v = -1", ">= 0"});
  }
  {
    SCOPED_TRACE("above the cpu's limit");
    expect_refused(d, d.args, ext_with(577), FLASHBOX_ERR_UNSUPPORTED_HEAD_DIM,
                   {"head_dim_v = 577", "device = cpu", "1..576"});
  }
  {
    SCOPED_TRACE("v rows too short for head_dim_v");
    flashbox_attention_args a = d.args;
    a.v_stride[2] = 64, a.v_stride[1] = 4 * 64 / 2, a.v_stride[0] = 17 * 2 * 64;  // a [.., 2, 64] v
    expect_refused(d, a, ext_with(128), FLASHBOX_ERR_BAD_STRIDE, {"v_stride", "head_dim_v = 128"});
  }
  {
    SCOPED_TRACE("o overlapping v");
    flashbox_attention_args a = d.args;
    a.o = const_cast<void *>(a.v);
    std::copy_n(a.v_stride, 3, a.o_stride);
    a.heads_q = a.heads_kv = 2;  // same shape as v, so only the overlap is wrong
    expect_refused(d, a, ext_with(128), FLASHBOX_ERR_INVALID_ARGUMENT, {"o = ", "overlaps v"});
  }
  {
    SCOPED_TRACE("o's layout with head_dim rows");
    flashbox_attention_args a = d.args;
    a.o_stride[2] = 64, a.o_stride[1] = 4 * 64, a.o_stride[0] = 17 * 4 * 64;  // o laid out for head_dim
    expect_refused(d, a, ext_with(128), FLASHBOX_ERR_BAD_STRIDE, {"o_stride", "head_dim_v = 128"});
  }
}

TEST(HeadDimVArgs, CudaDoesNotRefuseIt) {
  // device = cuda takes head_dim_v != head_dim: with the host buffers of this test the call fails for
  // them (or for want of a GPU or of CUDA in this build), never for head_dim_v, and writes nothing.
  AttentionCase c;
  c.seqlen_q = 17, c.seqlen_k = 17, c.heads_q = 4, c.heads_kv = 2, c.head_dim = 64, c.head_dim_v = 128;
  c.dtype = FLASHBOX_BFLOAT16;
  AttentionData d(c);
  for (flashbox_impl impl : {FLASHBOX_AUTO, FLASHBOX_NAIVE, FLASHBOX_FLASH}) {
    SCOPED_TRACE(flashbox_impl_name(impl));
    flashbox_attention_args a = d.args;
    a.device = FLASHBOX_CUDA, a.impl = impl;
    const std::vector<uint8_t> before = outputs_of(d);
    const flashbox_attention_ext e = ext_with(128);
    EXPECT_NE(flashbox_attention_forward_ext(&a, &e), FLASHBOX_OK);
    const std::string msg = flashbox_last_error();
    EXPECT_EQ(msg.find("head_dim_v"), std::string::npos) << msg;
    EXPECT_TRUE(before == outputs_of(d)) << "a failed call wrote an output";
  }
}

// The backward's buffers for a case: o and lse from the cpu forward (itself checked above), a fresh
// seeded random dout in o's layout ([.., heads_q, head_dim_v]), dq/dk/dv poisoned in q's, k's and v's
// layouts (dv: [.., heads_kv, head_dim_v]).
struct GradBuffers {
  explicit GradBuffers(const AttentionCase &c) : d(c) {
    const flashbox_attention_ext e = ext_with(c.head_dim_v);
    EXPECT_EQ(flashbox_attention_forward_ext(&d.args, &e), FLASHBOX_OK) << flashbox_last_error();
    dout.resize(d.o_bytes().size());
    std::mt19937_64 rng(c.seed ^ 0x5bd1e995u);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int64_t i = 0; i < d.o_shape().elements; ++i)
      flashbox::cpu::store_from_float(dout.data(), c.dtype, i, normal(rng));
    dq.resize(d.q_bytes().size()), dk.resize(d.k_bytes().size()), dv.resize(d.v_bytes().size());
    poison();
    g.fwd = d.args;
    g.dout = dout.data(), g.dq = dq.data(), g.dk = dk.data(), g.dv = dv.data();
    std::copy_n(d.o_shape().stride, 3, g.dout_stride), std::copy_n(d.q_shape().stride, 3, g.dq_stride);
    std::copy_n(d.k_shape().stride, 3, g.dk_stride), std::copy_n(d.v_shape().stride, 3, g.dv_stride);
  }
  void poison() {
    for (auto *buf : {&dq, &dk, &dv})
      for (size_t i = 0; i < buf->size(); ++i) (*buf)[i] = (i & 1) ? 0x7f : 0xff;  // NaN in every dtype
  }
  // Dense [batch, seq, heads, dim] of a strided gradient.
  std::vector<double> dense(const std::vector<uint8_t> &buf, const int64_t *stride, int64_t seq, int64_t heads,
                            int64_t dim) const {
    const AttentionCase &c = d.config();
    std::vector<double> out;
    out.reserve(size_t(c.batch * seq * heads * dim));
    for (int64_t b = 0; b < c.batch; ++b)
      for (int64_t t = 0; t < seq; ++t)
        for (int64_t h = 0; h < heads; ++h)
          for (int64_t x = 0; x < dim; ++x)
            out.push_back(
                flashbox::cpu::load_as_float(buf.data(), c.dtype, b * stride[0] + t * stride[1] + h * stride[2] + x));
    return out;
  }
  AttentionData d;
  std::vector<uint8_t> dout, dq, dk, dv;
  flashbox_attention_grad_args g{};
};

// Runs the extension's backward with c.head_dim_v and checks dq, dk, dv against the fp64 reference
// backward (relative error below the dtype's tolerance; NaN never passes).
void run_backward_and_check(const AttentionCase &c, int deterministic) {
  GradBuffers gb(c);
  SCOPED_TRACE(label(c, gb.d) + " deterministic " + std::to_string(deterministic));
  gb.g.deterministic = deterministic;
  const flashbox_attention_ext e = ext_with(c.head_dim_v);
  ASSERT_EQ(flashbox_attention_backward_ext(&gb.g, &e), FLASHBOX_OK) << flashbox_last_error();
  std::vector<double> rdq, rdk, rdv;
  flashbox::cpu::reference_attention_backward_fp64(gb.g, rdq, rdk, rdv, nullptr, c.head_dim_v);
  const int64_t dv = gb.d.dv();
  ASSERT_EQ(rdv.size(), size_t(c.batch * c.seqlen_k * c.heads_kv * dv));
  const std::pair<const char *, flashbox::test::RelError> errors[] = {
      {"dq", flashbox::test::rel_error(gb.dense(gb.dq, gb.g.dq_stride, c.seqlen_q, c.heads_q, c.head_dim), rdq)},
      {"dk", flashbox::test::rel_error(gb.dense(gb.dk, gb.g.dk_stride, c.seqlen_k, c.heads_kv, c.head_dim), rdk)},
      {"dv", flashbox::test::rel_error(gb.dense(gb.dv, gb.g.dv_stride, c.seqlen_k, c.heads_kv, dv), rdv)}};
  for (const auto &[name, r] : errors)
    EXPECT_LT(r.rel_or_inf(), gb.d.tolerance()) << name << " max abs error " << r.max_abs;
}

class HeadDimVBackward : public ::testing::TestWithParam<flashbox_impl> {};

constexpr Dims kBackwardDims[] = {{192, 128}, {64, 256}, {32, 16}, {16, 48}};

TEST_P(HeadDimVBackward, Fp32AgainstReference) {
  // The sanitizer build runs one of the two (layout, deterministic) pairs per (dims, lengths, causal), in turn.
  const std::pair<int64_t, int64_t> lengths[] = {{1, 1}, {17, 17}, {65, 65}, {17, 65}, {65, 17}};
  for (size_t di = 0; di < std::size(kBackwardDims); ++di)
    for (size_t li = 0; li < std::size(lengths); ++li)
      for (int causal : {0, 1})
        for (int deterministic : {0, 1}) {
          if (flashbox::test::kSanitizerBuild && deterministic != int((di + li + causal) % 2)) continue;
          const Dims &dims = kBackwardDims[di];
          const auto [sq, sk] = lengths[li];
          AttentionCase c;
          c.impl = GetParam(), c.batch = 1, c.seqlen_q = sq, c.seqlen_k = sk, c.heads_q = 4, c.heads_kv = 2;
          c.head_dim = dims.d, c.head_dim_v = dims.dv, c.causal = causal;
          c.layout = deterministic ? Layout::BHTD : Layout::BTHD;
          run_backward_and_check(c, deterministic);
        }
}

TEST_P(HeadDimVBackward, Bf16AgainstReference) {
  for (const Dims &dims : kBackwardDims)
    for (int causal : {0, 1}) {
      AttentionCase c;
      c.impl = GetParam(), c.batch = 1, c.seqlen_q = 65, c.seqlen_k = causal ? 65 : 17, c.heads_q = 4;
      c.heads_kv = 2, c.head_dim = dims.d, c.head_dim_v = dims.dv, c.causal = causal, c.dtype = FLASHBOX_BFLOAT16;
      run_backward_and_check(c, causal);
    }
}

INSTANTIATE_TEST_SUITE_P(Cpu, HeadDimVBackward, ::testing::Values(FLASHBOX_NAIVE, FLASHBOX_BLOCKED),
                         [](const auto &info) { return std::string(flashbox_impl_name(info.param)); });

TEST(HeadDimVBackwardEqual, GivenIsThePlainBackward) {
  // head_dim_v = head_dim given explicitly: the plain backward's bytes and kernel.
  for (flashbox_impl impl : {FLASHBOX_NAIVE, FLASHBOX_BLOCKED}) {
    AttentionCase c;
    c.impl = impl, c.seqlen_q = 65, c.seqlen_k = 33, c.heads_q = 4, c.heads_kv = 2, c.head_dim = 64, c.causal = 1;
    GradBuffers gb(c);
    SCOPED_TRACE(label(c, gb.d));
    ASSERT_EQ(flashbox_attention_backward(&gb.g), FLASHBOX_OK) << flashbox_last_error();
    const std::string kernel = flashbox_last_kernel();
    const std::vector<uint8_t> dq = gb.dq, dk = gb.dk, dv = gb.dv;
    gb.poison();
    const flashbox_attention_ext e = ext_with(64);
    ASSERT_EQ(flashbox_attention_backward_ext(&gb.g, &e), FLASHBOX_OK) << flashbox_last_error();
    EXPECT_EQ(kernel, flashbox_last_kernel());
    EXPECT_TRUE(dq == gb.dq && dk == gb.dk && dv == gb.dv) << "head_dim_v = head_dim differs from the plain backward";
  }
}

TEST(HeadDimVArgs, BackwardCpuAcceptsCudaDoesNotRefuse) {
  AttentionCase c;
  c.seqlen_q = 17, c.seqlen_k = 17, c.heads_q = 4, c.heads_kv = 2, c.head_dim = 64, c.head_dim_v = 128;
  GradBuffers gb(c);
  const flashbox_attention_ext e = ext_with(128);
  {
    SCOPED_TRACE("cpu");
    EXPECT_EQ(flashbox_attention_backward_ext(&gb.g, &e), FLASHBOX_OK) << flashbox_last_error();
  }
  {
    // Not refused for head_dim_v on cuda: these host buffers (or the want of a GPU or of CUDA in this
    // build) fail the call for another reason, and nothing is written.
    SCOPED_TRACE("cuda");
    gb.poison();
    const std::vector<uint8_t> dq0 = gb.dq, dk0 = gb.dk, dv0 = gb.dv;
    flashbox_attention_grad_args g = gb.g;
    g.fwd.device = FLASHBOX_CUDA, g.fwd.dtype = FLASHBOX_BFLOAT16;
    EXPECT_NE(flashbox_attention_backward_ext(&g, &e), FLASHBOX_OK);
    const std::string msg = flashbox_last_error();
    EXPECT_EQ(msg.find("head_dim_v"), std::string::npos) << msg;
    EXPECT_TRUE(gb.dq == dq0 && gb.dk == dk0 && gb.dv == dv0) << "the failed backward wrote a gradient";
  }
  {
    SCOPED_TRACE("dv laid out with head_dim rows");
    flashbox_attention_grad_args g = gb.g;
    std::copy_n(gb.d.k_shape().stride, 3, g.dv_stride);  // k is [.., 2, 64]: too short for head_dim_v rows
    g.dv_stride[2] = 64, g.dv_stride[1] = 2 * 64, g.dv_stride[0] = 17 * 2 * 64;
    EXPECT_EQ(flashbox_attention_backward_ext(&g, &e), FLASHBOX_ERR_BAD_STRIDE) << flashbox_last_error();
    const std::string msg = flashbox_last_error();
    EXPECT_NE(msg.find("dv_stride"), std::string::npos) << msg;
  }
}

}  // namespace
