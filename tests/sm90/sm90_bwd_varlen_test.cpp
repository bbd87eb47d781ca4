// The Hopper backward on variable-length batches (cu_seqlens, [total, heads, head_dim] tensors;
// flashbox_attention_backward_ext) against the fp64 CPU reference backward
// (src/cpu/reference_backward_fp64.hpp), one reference call per sequence with the same
// core::ScoreMods. The backward runs on the GPU forward's own O and LSE (the sm90 varlen forward:
// what a training step does). Every case draws fresh seeded bf16/fp16 inputs (seed in the failure
// message; FLASHBOX_TEST_SEED=N reproduces). Lengths include 0 and 1, the tile edges (63..65, 127..129),
// 1000 and 4097; seqlen_q != seqlen_k per sequence (causal bottom-right aligned per sequence: rows
// without keys, keys without rows), GQA and MQA, windows, softcap, ALiBi per head and per sequence,
// head_dim 64 and 128, and head dims that run on a wider kernel with zero columns (8, 32, 40, 56 on
// d64; 72, 80 and 96 itself on d96; 104, 112, 120 on d128: bwd_route.hpp). dq/dk/dv are poisoned
// (NaN) and framed by guard bytes that must survive; the relative error of each gradient over the
// packed tensor must be < 1e-2 (NaN never passes); the kernel that ran must be the sm90 backward's
// varlen path of the instantiation that serves the head_dim (auto picks it on compute capability
// 9.0); the deterministic mode must repeat bitwise. Skips without an sm90 GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/masks.hpp"
#include "cpu/reference_backward_fp64.hpp"
#include "cuda/backward/sm90/bwd_route.hpp"
#include "flashbox/flashbox.h"
#include "sm90/hopper_device.hpp"
#include "sm90/varlen_case.hpp"
#include "support/attention_case.hpp"

namespace flashbox::test::sm90_bwd_varlen {
namespace {

using Case = VarlenShape;

void check(const Case &c) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(c.name() + " seed " + std::to_string(seed) + " (FLASHBOX_TEST_SEED=" + std::to_string(seed) + ")");
  ASSERT_EQ(c.lens_q.size(), c.lens_k.size());
  const int64_t B = int64_t(c.lens_q.size()), HQ = c.heads_q, HKV = c.heads_kv, D = c.head_dim, es = 2;
  const VarlenPacking p(c);
  const std::vector<int32_t> &cu_q = p.cu_q, &cu_k = p.cu_k;
  const int64_t TQ = p.total_q, TK = p.total_k;
  Sm90Inputs inputs(seed);  // q, k, v, dout, then the slopes, in that order
  const std::vector<uint8_t> q = inputs.normal(c.dtype, TQ * HQ * D), k = inputs.normal(c.dtype, TK * HKV * D),
                             v = inputs.normal(c.dtype, TK * HKV * D), dout = inputs.normal(c.dtype, TQ * HQ * D);
  const std::vector<float> slopes = inputs.slopes(c.alibi, B, HQ, c.slope_stride());

  // The reference, one fixed-length call per sequence, into the packed [total, heads, dim] layout.
  // A sequence without keys has dQ = 0, one without queries dK = dV = 0 (the zeros already there).
  std::vector<double> ref_dq(size_t(TQ * HQ * D), 0.0), ref_dk(size_t(TK * HKV * D), 0.0), ref_dv(ref_dk);
  for (int64_t s = 0; s < B; ++s) {
    const int64_t q0 = cu_q[size_t(s)], k0 = cu_k[size_t(s)], lq = c.lens_q[size_t(s)], lk = c.lens_k[size_t(s)];
    if (lq == 0 || lk == 0) continue;
    flashbox_attention_grad_args hg{};
    hg.fwd = sequence_args(c, p, s, q.data(), k.data(), v.data());
    hg.dout = dout.data() + q0 * HQ * D * es;
    std::copy_n(hg.fwd.q_stride, 3, hg.dout_stride);
    const core::ScoreMods mods = sequence_mods(c, slopes, s);
    std::vector<double> sdq, sdk, sdv;
    cpu::reference_attention_backward_fp64(hg, sdq, sdk, sdv, &mods);
    std::copy(sdq.begin(), sdq.end(), ref_dq.begin() + q0 * HQ * D);
    std::copy(sdk.begin(), sdk.end(), ref_dk.begin() + k0 * HKV * D);
    std::copy(sdv.begin(), sdv.end(), ref_dv.begin() + k0 * HKV * D);
  }

  DeviceMem mem;
  void *d_q = mem.alloc(q.size()), *d_k = mem.alloc(k.size()), *d_v = mem.alloc(v.size());
  void *d_do = mem.alloc(dout.size()), *d_o = mem.alloc(q.size()), *d_lse = mem.alloc(size_t(HQ * TQ) * 4);
  void *dcu_q = mem.alloc(cu_q.size() * 4), *dcu_k = mem.alloc(cu_k.size() * 4);
  float *dslopes = c.alibi ? static_cast<float *>(mem.alloc(slopes.size() * 4)) : nullptr;
  ASSERT_TRUE(d_q && d_k && d_v && d_do && d_o && d_lse && dcu_q && dcu_k && (!c.alibi || dslopes)) << "cudaMalloc";
  CUDA_OK(cudaMemcpy(d_q, q.data(), q.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(d_k, k.data(), k.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(d_v, v.data(), v.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(d_do, dout.data(), dout.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dcu_q, cu_q.data(), cu_q.size() * 4, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dcu_k, cu_k.data(), cu_k.size() * 4, cudaMemcpyHostToDevice));
  if (c.alibi) CUDA_OK(cudaMemcpy(dslopes, slopes.data(), slopes.size() * 4, cudaMemcpyHostToDevice));

  flashbox_attention_args a = packed_args(c, p, D);
  a.q = d_q, a.k = d_k, a.v = d_v, a.o = d_o, a.lse = static_cast<float *>(d_lse);
  const flashbox_attention_ext e = packed_ext(c, p, dslopes, dcu_q, dcu_k);
  ASSERT_EQ(flashbox_attention_forward_ext(&a, &e), 0) << flashbox_last_error();
  const std::string fwd_kernel = flashbox_last_kernel();
  CUDA_OK(cudaDeviceSynchronize());

  const size_t sizes[3] = {q.size(), k.size(), v.size()};
  const std::vector<double> *refs[3] = {&ref_dq, &ref_dk, &ref_dv};
  const char *names[3] = {"dq", "dk", "dv"};
  std::vector<uint8_t> first[3];
  for (int run = 0; run < 3; ++run) {  // atomic dQ, then deterministic twice (bitwise equal)
    const int det = run > 0;
    uint8_t *raw[3];
    for (int x = 0; x < 3; ++x) {
      raw[x] = static_cast<uint8_t *>(mem.alloc(sizes[x] + 2 * kGuard));
      ASSERT_NE(raw[x], nullptr) << "cudaMalloc";
      CUDA_OK(cudaMemset(raw[x], kGuardByte, sizes[x] + 2 * kGuard));
      CUDA_OK(cudaMemset(raw[x] + kGuard, 0xff, sizes[x]));  // NaN poison
    }
    flashbox_attention_grad_args g{};
    g.fwd = a;
    g.dout = d_do;
    std::copy_n(a.q_stride, 3, g.dout_stride), std::copy_n(a.q_stride, 3, g.dq_stride);
    std::copy_n(a.k_stride, 3, g.dk_stride), std::copy_n(a.v_stride, 3, g.dv_stride);
    g.dq = raw[0] + kGuard, g.dk = raw[1] + kGuard, g.dv = raw[2] + kGuard;
    g.deterministic = det;
    ASSERT_EQ(flashbox_attention_backward_ext(&g, &e), 0) << flashbox_last_error();
    const std::string kernel = flashbox_last_kernel();
    CUDA_OK(cudaDeviceSynchronize());
    EXPECT_EQ(kernel.rfind("cuda_flash_bwd_sm90_d" + std::to_string(sm90::bwd::kernel_head_dim(D)) + "_", 0), 0u)
        << "ran " << kernel;
    EXPECT_NE(kernel.find("_varlen"), std::string::npos) << "ran " << kernel;
    if (det) {
      EXPECT_NE(kernel.find("_deterministic"), std::string::npos) << "ran " << kernel;
    }
    std::vector<uint8_t> got[3];
    for (int x = 0; x < 3; ++x) {
      std::vector<uint8_t> all(sizes[x] + 2 * kGuard);
      CUDA_OK(cudaMemcpy(all.data(), raw[x], all.size(), cudaMemcpyDeviceToHost));
      EXPECT_TRUE(guard_intact(all, sizes[x])) << "a guard byte around " << names[x] << " changed (" << kernel << ")";
      got[x].assign(all.begin() + long(kGuard), all.begin() + long(kGuard + sizes[x]));
      const double err = rel_error(got[x].data(), c.dtype, *refs[x]);
      EXPECT_LT(err, 1e-2) << names[x] << " rel error (" << kernel << ", forward " << fwd_kernel << ")";
      if (run == 0) std::fprintf(stderr, "  %s %s rel %.3e\n", c.name().c_str(), names[x], err);
    }
    if (run == 1)
      for (int x = 0; x < 3; ++x) first[x] = got[x];
    if (run == 2) {
      for (int x = 0; x < 3; ++x) {
        EXPECT_TRUE(first[x] == got[x]) << names[x] << ": deterministic mode not repeatable";
      }
    }
    if (run == 0) std::fprintf(stderr, "  %s: %s / %s\n", c.name().c_str(), fwd_kernel.c_str(), kernel.c_str());
  }
}

Case mk(std::vector<int> lq, std::vector<int> lk, int64_t d, int causal) {
  return varlen_case<Case>(std::move(lq), std::move(lk), d, causal);
}

class Sm90BwdVarlen : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!have_hopper(why)) GTEST_SKIP() << "sm90 backward varlen test not run: " << why;
  }
};

// Small (compute-sanitizer memcheck runs these): lengths at the tile edges, 0 and 1, causal and not,
// GQA, head_dim 64 and 128.
TEST_F(Sm90BwdVarlen, SmallTileEdges) {
  const std::vector<int> lens{63, 0, 1, 65, 129, 17};
  for (int64_t d : {64, 128})
    for (int causal : {0, 1}) check(mk(lens, lens, d, causal));
}

// seqlen_q != seqlen_k per sequence: rows without keys under causal, sequences without keys (dQ = 0)
// or without queries (dK = dV = 0); MQA and fp16.
TEST_F(Sm90BwdVarlen, SmallDifferentLengths) {
  for (int causal : {0, 1}) {
    Case c = mk({17, 65, 0, 3, 130}, {65, 17, 9, 0, 64}, 64, causal);
    check(c);
    c.head_dim = 128, c.heads_kv = 1, c.dtype = FLASHBOX_FLOAT16;
    check(c);
  }
}

// Windows, softcap and ALiBi (per head and per sequence) with varlen.
TEST_F(Sm90BwdVarlen, SmallWindowsSoftcapAlibi) {
  Case c = mk({1, 63, 129, 200}, {40, 63, 129, 150}, 128, 0);
  c.window_left = 16, c.window_right = 8, c.softcap = 5.0f, c.alibi = 2;
  check(c);
  c = mk({70, 5, 190}, {70, 90, 100}, 64, 1);
  c.window_left = 20, c.alibi = 1;
  check(c);
  c = mk({33, 130, 2}, {33, 64, 77}, 64, 0);
  c.window_left = 5, c.window_right = -1, c.softcap = 3.0f, c.dtype = FLASHBOX_FLOAT16;
  check(c);
}

// Head dims below the instantiation's (zeros past head_dim; the varlen dQ convert reads accumulator
// rows of the instantiation's width and writes head_dim columns), the d32 instantiation, whose rows
// are 64 floats (8..32), and the d96 one, whose rows are 128 floats (72, 80, 96): lengths with 0 and 1 and the tile edges, causal and not, GQA and
// MQA, seqlen_q != seqlen_k, fp16 (small: compute-sanitizer runs these).
TEST_F(Sm90BwdVarlen, PaddedHeadDims) {
  const std::vector<int> lens{63, 0, 1, 65, 129, 17};
  for (int64_t d : {8, 16, 24, 32, 40, 56, 72, 80, 96, 104, 112, 120}) {
    Case c = mk(lens, lens, d, int(d % 16 == 8));
    check(c);
  }
  Case c = mk({17, 65, 0, 3, 130}, {65, 17, 9, 0, 64}, 40, 1);
  c.heads_kv = 1, c.dtype = FLASHBOX_FLOAT16;
  check(c);
  c = mk({17, 65, 0, 3, 130}, {65, 17, 9, 0, 64}, 112, 0);
  check(c);
  c = mk({17, 65, 0, 3, 130}, {65, 17, 9, 0, 64}, 80, 1);
  c.dtype = FLASHBOX_FLOAT16;
  check(c);
}

// The same at longer lengths (1000 beside 0 and 1).
TEST_F(Sm90BwdVarlen, PaddedHeadDimsLong) {
  Case c = mk({1000, 1, 0, 300}, {700, 1, 5, 300}, 32, 1);
  c.heads_q = 4, c.heads_kv = 2;
  check(c);
  c = mk({1000, 1, 0, 300}, {700, 1, 5, 300}, 120, 1);
  c.dtype = FLASHBOX_FLOAT16;
  check(c);
  c = mk({1000, 1, 0, 300}, {700, 1, 5, 300}, 96, 0);
  c.heads_q = 4, c.heads_kv = 1;
  check(c);
}

// Long and mixed: 1000 and 4097 beside 0 and 1, random lengths.
TEST_F(Sm90BwdVarlen, LongMixed) {
  Case c = mk({1000, 4097, 0, 1, 300}, {1000, 4097, 5, 1, 200}, 64, 1);
  c.heads_q = 2, c.heads_kv = 1;
  check(c);
  c = mk({700, 1000, 129}, {1000, 900, 129}, 128, 0);
  c.softcap = 20.0f, c.dtype = FLASHBOX_FLOAT16;
  check(c);
  c = mk({1000, 513, 64}, {1000, 513, 64}, 128, 1);
  c.window_left = 100, c.alibi = 2;
  check(c);
}

TEST_F(Sm90BwdVarlen, RandomLengths) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("lengths seed " + std::to_string(seed) + " (FLASHBOX_TEST_SEED=" + std::to_string(seed) + ")");
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> len(0, 400);
  for (int64_t d : {64, 128}) {
    std::vector<int> lq, lk;
    for (int i = 0; i < 12; ++i) {
      const int x = i == 0 ? 0 : (i == 1 ? 1 : len(rng));
      lq.push_back(x), lk.push_back(i % 3 == 2 ? len(rng) : x);
    }
    Case c = mk(lq, lk, d, int(d == 64));
    c.heads_q = 4, c.heads_kv = d == 64 ? 1 : 4;
    check(c);
  }
}

}  // namespace
}  // namespace flashbox::test::sm90_bwd_varlen
