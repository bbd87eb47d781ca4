// Outputs interleaved in one buffer through the C API (CPU): FlashAttention-2's packed gradients
// (dqkv[:, :, i] for flash_attn_qkvpacked_func, dkv[:, :, i] for flash_attn_kvpacked_func) and a
// forward o interleaved with its q are accepted and give the same values as separate buffers;
// views that really share elements are refused with the overlap message and nothing written.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "flashbox/flashbox.h"
#include "support/attention_case.hpp"

namespace {

struct Shape {
  int64_t b, sq, sk, hq, hkv, d;
};

// [b, s, slots, h, d] fp32 buffer; slot i is a [b, s, h, d] view.
struct Packed {
  Packed(int64_t b, int64_t s, int64_t slots, int64_t h, int64_t d) : b(b), s(s), slots(slots), h(h), d(d) {
    data.assign(size_t(b * s * slots * h * d), std::nanf(""));
  }
  float *slot(int i) { return data.data() + i * h * d; }
  void stride(int64_t (&st)[3]) const { st[0] = s * slots * h * d, st[1] = slots * h * d, st[2] = d; }
  void fill(std::mt19937_64 &rng) {
    std::normal_distribution<float> n(0.f, 1.f);
    for (float &x : data) x = n(rng);
  }
  int64_t b, s, slots, h, d;
  std::vector<float> data;
};

void dense_stride(int64_t s, int64_t h, int64_t d, int64_t (&st)[3]) { st[0] = s * h * d, st[1] = h * d, st[2] = d; }

// Max relative difference of a packed slot against a dense [b, s, h, d] tensor.
double rel_diff(Packed &p, int slot, const std::vector<float> &dense) {
  double diff2 = 0, ref2 = 0;
  int64_t st[3];
  p.stride(st);
  size_t n = 0;
  for (int64_t b = 0; b < p.b; ++b)
    for (int64_t t = 0; t < p.s; ++t)
      for (int64_t h = 0; h < p.h; ++h)
        for (int64_t x = 0; x < p.d; ++x, ++n) {
          const double got = p.slot(slot)[b * st[0] + t * st[1] + h * st[2] + x], want = dense[n];
          if (!std::isfinite(got)) return INFINITY;
          diff2 += (got - want) * (got - want), ref2 += want * want;
        }
  return std::sqrt(diff2 / ref2);
}

flashbox_attention_args base_args(const Shape &s) {
  flashbox_attention_args a{};
  a.device = FLASHBOX_CPU, a.dtype = FLASHBOX_FLOAT32, a.impl = FLASHBOX_AUTO;
  a.batch = s.b, a.seqlen_q = s.sq, a.seqlen_k = s.sk, a.heads_q = s.hq, a.heads_kv = s.hkv, a.head_dim = s.d;
  a.causal = 1;
  return a;
}

TEST(PackedOutputs, QkvPackedGradientsMatchSeparateBuffers) {
  const uint64_t seed = flashbox::test::fresh_seed();
  std::mt19937_64 rng(seed);
  const Shape s{2, 37, 37, 3, 3, 32};
  Packed qkv(s.b, s.sq, 3, s.hq, s.d), dqkv(s.b, s.sq, 3, s.hq, s.d);
  qkv.fill(rng);
  flashbox_attention_args a = base_args(s);
  a.q = qkv.slot(0), a.k = qkv.slot(1), a.v = qkv.slot(2);
  qkv.stride(a.q_stride), qkv.stride(a.k_stride), qkv.stride(a.v_stride);
  std::vector<float> o(size_t(s.b * s.sq * s.hq * s.d)), lse(size_t(s.b * s.hq * s.sq)), dout(o.size());
  for (float &x : dout) x = std::normal_distribution<float>(0.f, 1.f)(rng);
  a.o = o.data(), a.lse = lse.data();
  dense_stride(s.sq, s.hq, s.d, a.o_stride);
  ASSERT_EQ(flashbox_attention_forward(&a), FLASHBOX_OK) << flashbox_last_error();

  flashbox_attention_grad_args g{};
  g.fwd = a;
  g.dout = dout.data();
  dense_stride(s.sq, s.hq, s.d, g.dout_stride);
  // Separate buffers first: the values the packed call must reproduce.
  std::vector<float> dq(o.size()), dk(o.size()), dv(o.size());
  g.dq = dq.data(), g.dk = dk.data(), g.dv = dv.data();
  dense_stride(s.sq, s.hq, s.d, g.dq_stride), dense_stride(s.sk, s.hkv, s.d, g.dk_stride);
  dense_stride(s.sk, s.hkv, s.d, g.dv_stride);
  ASSERT_EQ(flashbox_attention_backward(&g), FLASHBOX_OK) << flashbox_last_error();

  g.dq = dqkv.slot(0), g.dk = dqkv.slot(1), g.dv = dqkv.slot(2);
  dqkv.stride(g.dq_stride), dqkv.stride(g.dk_stride), dqkv.stride(g.dv_stride);
  ASSERT_EQ(flashbox_attention_backward(&g), FLASHBOX_OK) << "packed dqkv refused: " << flashbox_last_error();
  EXPECT_LT(rel_diff(dqkv, 0, dq), 1e-6) << "seed " << seed;
  EXPECT_LT(rel_diff(dqkv, 1, dk), 1e-6) << "seed " << seed;
  EXPECT_LT(rel_diff(dqkv, 2, dv), 1e-6) << "seed " << seed;
  for (float x : dqkv.data) ASSERT_TRUE(std::isfinite(x)) << "an element of dqkv was not written";

  // dv shifted by one element onto dk's rows: refused, with the message naming both, nothing written.
  const std::vector<float> before = dqkv.data;
  g.dv = dqkv.slot(2) - 1;
  EXPECT_EQ(flashbox_attention_backward(&g), FLASHBOX_ERR_INVALID_ARGUMENT);
  const std::string msg = flashbox_last_error();
  EXPECT_NE(msg.find("dk = "), std::string::npos) << msg;
  EXPECT_NE(msg.find("overlaps dv"), std::string::npos) << msg;
  EXPECT_EQ(std::memcmp(before.data(), dqkv.data.data(), before.size() * 4), 0) << "written on failure";
  // dq written into the packed input qkv (k's slot): refused.
  g.dv = dqkv.slot(2);
  g.dq = qkv.slot(1);
  EXPECT_EQ(flashbox_attention_backward(&g), FLASHBOX_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashbox_last_error()).find("overlaps k"), std::string::npos) << flashbox_last_error();
}

TEST(PackedOutputs, KvPackedGqaGradientsMatchSeparateBuffers) {
  const uint64_t seed = flashbox::test::fresh_seed();
  std::mt19937_64 rng(seed);
  const Shape s{3, 20, 45, 4, 2, 16};
  Packed kv(s.b, s.sk, 2, s.hkv, s.d), dkv(s.b, s.sk, 2, s.hkv, s.d);
  kv.fill(rng);
  std::vector<float> q(size_t(s.b * s.sq * s.hq * s.d)), o(q.size()), dout(q.size()), dq(q.size()), dq2(q.size());
  std::vector<float> lse(size_t(s.b * s.hq * s.sq));
  for (float &x : q) x = std::normal_distribution<float>(0.f, 1.f)(rng);
  for (float &x : dout) x = std::normal_distribution<float>(0.f, 1.f)(rng);
  flashbox_attention_args a = base_args(s);
  a.causal = 0;
  a.q = q.data(), a.k = kv.slot(0), a.v = kv.slot(1), a.o = o.data(), a.lse = lse.data();
  dense_stride(s.sq, s.hq, s.d, a.q_stride), dense_stride(s.sq, s.hq, s.d, a.o_stride);
  kv.stride(a.k_stride), kv.stride(a.v_stride);
  ASSERT_EQ(flashbox_attention_forward(&a), FLASHBOX_OK) << flashbox_last_error();

  flashbox_attention_grad_args g{};
  g.fwd = a;
  g.dout = dout.data();
  dense_stride(s.sq, s.hq, s.d, g.dout_stride), dense_stride(s.sq, s.hq, s.d, g.dq_stride);
  const size_t nkv = size_t(s.b * s.sk * s.hkv * s.d);
  std::vector<float> dk(nkv), dv(nkv);
  g.dq = dq.data(), g.dk = dk.data(), g.dv = dv.data();
  dense_stride(s.sk, s.hkv, s.d, g.dk_stride), dense_stride(s.sk, s.hkv, s.d, g.dv_stride);
  ASSERT_EQ(flashbox_attention_backward(&g), FLASHBOX_OK) << flashbox_last_error();
  g.dq = dq2.data(), g.dk = dkv.slot(0), g.dv = dkv.slot(1);
  dkv.stride(g.dk_stride), dkv.stride(g.dv_stride);
  g.deterministic = 1;
  ASSERT_EQ(flashbox_attention_backward(&g), FLASHBOX_OK) << "packed dkv refused: " << flashbox_last_error();
  EXPECT_LT(rel_diff(dkv, 0, dk), 1e-6) << "seed " << seed;
  EXPECT_LT(rel_diff(dkv, 1, dv), 1e-6) << "seed " << seed;
  // dk and dv both at slot 0: the same elements.
  g.dv = dkv.slot(0);
  EXPECT_EQ(flashbox_attention_backward(&g), FLASHBOX_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashbox_last_error()).find("overlaps dv"), std::string::npos) << flashbox_last_error();
}

TEST(PackedOutputs, ForwardOutputInterleavedWithQ) {
  const uint64_t seed = flashbox::test::fresh_seed();
  std::mt19937_64 rng(seed);
  const Shape s{2, 19, 19, 2, 2, 24};
  for (flashbox_impl impl : {FLASHBOX_NAIVE, FLASHBOX_BLOCKED}) {
    Packed qo(s.b, s.sq, 2, s.hq, s.d), kv(s.b, s.sk, 2, s.hkv, s.d);
    qo.fill(rng), kv.fill(rng);
    flashbox_attention_args a = base_args(s);
    a.impl = impl;
    a.q = qo.slot(0), a.k = kv.slot(0), a.v = kv.slot(1);
    qo.stride(a.q_stride), kv.stride(a.k_stride), kv.stride(a.v_stride);
    std::vector<float> o(size_t(s.b * s.sq * s.hq * s.d)), lse(size_t(s.b * s.hq * s.sq)), lse2(lse.size());
    a.o = o.data(), a.lse = lse.data();
    dense_stride(s.sq, s.hq, s.d, a.o_stride);
    ASSERT_EQ(flashbox_attention_forward(&a), FLASHBOX_OK) << flashbox_last_error();
    a.o = qo.slot(1), a.lse = lse2.data();
    qo.stride(a.o_stride);
    ASSERT_EQ(flashbox_attention_forward(&a), FLASHBOX_OK) << "o interleaved with q refused: " << flashbox_last_error();
    EXPECT_LT(rel_diff(qo, 1, o), 1e-6) << "seed " << seed;
    // o half a head onto q: refused.
    a.o = qo.slot(1) - s.d / 2;
    EXPECT_EQ(flashbox_attention_forward(&a), FLASHBOX_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(flashbox_last_error()).find("overlaps q"), std::string::npos) << flashbox_last_error();
  }
}

}  // namespace
