// The Hopper backward's gradient check shared by its tests (sm90_bwd_mods_test.cpp: masks and score
// transforms at head_dim 64 and 128; sm90_bwd_d192_test.cpp and sm90_bwd_d256_test.cpp: the
// head_dim 192 and 256 kernels and the head dims they serve): one case of random inputs (seed
// printed; FLASHBOX_TEST_SEED=N repeats one), the GPU forward's own O and LSE, the backward three
// times (atomic dQ, then deterministic twice, which must repeat bitwise) into NaN-poisoned gradients
// framed by guard bytes that must survive, each
// gradient against the fp64 CPU reference backward (src/cpu/reference_backward_fp64.hpp) with the
// same core::ScoreMods, relative error < 1e-2; and the kernel that ran must be the one the case names
// (auto picks the sm90 backward on compute capability 9.0 unless FLASHBOX_BWD_ARCH=sm80). The device
// buffers, the error measure and the case's shape and mods (support/mods_case.hpp, with
// tests/cuda/ext_sm80_test.cpp) are the GPU tests' shared ones (tests/support); run_cases is every
// test's case loop.
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/masks.hpp"
#include "cpu/reference_backward_fp64.hpp"
#include "cpu/reference_fp64.hpp"
#include "flashbox/flashbox.h"
#include "sm90/hopper_device.hpp"
#include "support/attention_case.hpp"
#include "support/device_buffers.hpp"  // GuardedOutput, DeviceInput
#include "support/family_pin.hpp"
#include "support/mods_case.hpp"
#include "support/output_error.hpp"

namespace flashbox::test::sm90_bwd {

inline bool small_only() {
  const char *s = std::getenv("FLASHBOX_SM90_MODS_SMALL");
  return s && *s && *s != '0';
}

inline bool sm80_forced() {
  const char *s = std::getenv("FLASHBOX_BWD_ARCH");
  return s && std::string(s) == "sm80";
}

// The shape and mods (support/mods_case.hpp), then the dtype.
struct BwdCase : ModsCase {
  flashbox_dtype dtype = FLASHBOX_BFLOAT16;
};

// Largest gradient error a test saw, printed at its end: the measured accuracy.
struct Worst {
  double rel = 0;
  ~Worst() { std::fprintf(stderr, "  worst gradient rel error of this test: %.3e\n", rel); }
};

// The kernel of the atomic-dQ run must contain `kernel_atomic` (unless FLASHBOX_BWD_ARCH=sm80); the
// deterministic runs' must contain `kernel_det` (nullptr: "sm90", the same family; "" for no check:
// a head_dim whose sm90 kernel has no deterministic mode falls back to the sm80 family).
// kernel_fwd: a part of the forward's kernel name the case must run (null: any).
inline void run_case(const BwdCase &c, Worst &worst, const char *kernel_atomic = "sm90",
                     const char *kernel_det = "sm90", const char *kernel_fwd = nullptr) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(c.name + " seed " + std::to_string(seed) + " (FLASHBOX_TEST_SEED=" + std::to_string(seed) + ")");
  std::mt19937_64 rng(seed);
  const int64_t B = c.batch, SQ = c.seqlen_q, SK = c.seqlen_k, HQ = c.heads_q, HKV = c.heads_kv, D = c.head_dim;
  const flashbox_dtype dt = c.dtype;
  std::normal_distribution<float> normal(0.f, 1.f);
  auto random = [&](int64_t n) {
    std::vector<uint8_t> v(size_t(n * 2));
    for (int64_t i = 0; i < n; ++i) cpu::store_from_float(v.data(), dt, i, normal(rng));
    return v;
  };
  const std::vector<uint8_t> q = random(B * SQ * HQ * D), k = random(B * SK * HKV * D), v = random(B * SK * HKV * D);
  const std::vector<uint8_t> dout = random(B * SQ * HQ * D);
  const std::vector<float> slopes = random_slopes(c, rng);

  flashbox_attention_args a{};
  a.dtype = dt, a.impl = FLASHBOX_AUTO;
  a.batch = B, a.seqlen_q = SQ, a.seqlen_k = SK, a.heads_q = HQ, a.heads_kv = HKV, a.head_dim = D;
  a.causal = c.causal;
  const int64_t qs[3] = {SQ * HQ * D, HQ * D, D}, ks[3] = {SK * HKV * D, HKV * D, D};
  std::copy_n(qs, 3, a.q_stride), std::copy_n(qs, 3, a.o_stride);
  std::copy_n(ks, 3, a.k_stride), std::copy_n(ks, 3, a.v_stride);

  // fp64 reference: forward (for nothing but the check's O) and backward with the same mods.
  const core::ScoreMods m = reference_mods(c, slopes.data());
  flashbox_attention_args host = a;
  host.device = FLASHBOX_CPU;
  host.q = q.data(), host.k = k.data(), host.v = v.data();
  flashbox_attention_grad_args hg{};
  hg.fwd = host;
  hg.dout = dout.data();
  std::copy_n(qs, 3, hg.dout_stride);
  std::vector<double> ref_dq, ref_dk, ref_dv;
  cpu::reference_attention_backward_fp64(hg, ref_dq, ref_dk, ref_dv, &m);

  DeviceInput dq_in(q.data(), q.size()), dk_in(k.data(), k.size()), dv_in(v.data(), v.size());
  DeviceInput ddout(dout.data(), dout.size()), dslopes(slopes.data(), slopes.size() * 4);
  void *o = nullptr, *lse = nullptr;
  ASSERT_EQ(cudaMalloc(&o, q.size()), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&lse, size_t(B * HQ * SQ) * 4), cudaSuccess);
  a.device = FLASHBOX_CUDA;
  a.q = dq_in.ptr, a.k = dk_in.ptr, a.v = dv_in.ptr, a.o = o, a.lse = static_cast<float *>(lse);
  const flashbox_attention_ext e = call_ext(c, dslopes.ptr);
  ASSERT_EQ(flashbox_attention_forward_ext(&a, &e), 0) << flashbox_last_error();
  const std::string fwd_kernel = flashbox_last_kernel();
  if (kernel_fwd != nullptr)
    EXPECT_NE(fwd_kernel.find(kernel_fwd), std::string::npos)
        << "expected a forward named *" << kernel_fwd << "*, ran " << fwd_kernel;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  std::vector<uint8_t> first[3];
  for (int run = 0; run < 3; ++run) {  // atomic dQ, then deterministic twice (bitwise equal)
    const int det = run > 0;
    GuardedOutput gq(q.size()), gk(k.size()), gv(v.size());
    ASSERT_TRUE(gq.raw && gk.raw && gv.raw) << "device allocation";
    flashbox_attention_grad_args g{};
    g.fwd = a;
    g.dout = ddout.ptr;
    std::copy_n(qs, 3, g.dout_stride), std::copy_n(qs, 3, g.dq_stride);
    std::copy_n(ks, 3, g.dk_stride), std::copy_n(ks, 3, g.dv_stride);
    g.dq = gq.ptr(), g.dk = gk.ptr(), g.dv = gv.ptr();
    g.deterministic = det;
    ASSERT_EQ(flashbox_attention_backward_ext(&g, &e), 0) << flashbox_last_error();
    const std::string kernel = flashbox_last_kernel();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << kernel;
    const char *want = det ? kernel_det : kernel_atomic;
    if (!sm80_forced() && want != nullptr && *want) {
      EXPECT_NE(kernel.find(want), std::string::npos) << "expected a kernel named *" << want << "*, ran " << kernel;
    }
    if (det) {
      EXPECT_NE(kernel.find("deterministic"), std::string::npos) << kernel;
    }
    std::vector<uint8_t> got[3];
    ASSERT_TRUE(gq.back(got[0])) << "a guard byte around dq changed (" << kernel << ")";
    ASSERT_TRUE(gk.back(got[1])) << "a guard byte around dk changed (" << kernel << ")";
    ASSERT_TRUE(gv.back(got[2])) << "a guard byte around dv changed (" << kernel << ")";
    const char *names[3] = {"dq", "dk", "dv"};
    const std::vector<double> *refs[3] = {&ref_dq, &ref_dk, &ref_dv};
    for (int x = 0; x < 3; ++x) {
      const double err = rel_error(got[x].data(), dt, *refs[x]);
      worst.rel = std::max(worst.rel, err);
      EXPECT_LT(err, 1e-2) << names[x] << " rel error (" << kernel << ", forward " << fwd_kernel << ")";
    }
    if (run == 1)
      for (int x = 0; x < 3; ++x) first[x] = got[x];
    if (run == 2) {
      for (int x = 0; x < 3; ++x) EXPECT_TRUE(first[x] == got[x]) << names[x] << ": deterministic mode not repeatable";
    }
    if (run == 0) std::printf("  %-52s %s / %s\n", c.name.c_str(), fwd_kernel.c_str(), kernel.c_str());
  }
  cudaFree(o);
  cudaFree(lse);
}

// The edge shapes every head dim's kernel runs (sm90_bwd_d192/d256/pad_dims_test.cpp small, and with
// sm90_bwd_d96_test.cpp long), each at the head_dim given for it, named as the tables name theirs:
// T = 1; causal T = 17 with GQA; 65 x 64 MQA; causal 64 x 130 (keys without rows) and 130 x 17 (rows
// without keys); fp16 T = 65 GQA; a window, softcap and ALiBi per head at 65 x 65.
struct SmallEdgeDims {
  int64_t t1, causal_t17_gqa, mqa, keys_without_rows, rows_without_keys, fp16_gqa, mods;
};
inline std::string dim_suffix(int64_t d) { return " d" + std::to_string(d); }  // a case name's head_dim
inline std::vector<BwdCase> small_edges(const SmallEdgeDims &d) {
  return {
      {{"T1" + dim_suffix(d.t1), 1, 1, 1, 2, 2, d.t1, 0}},
      {{"causal T17 GQA" + dim_suffix(d.causal_t17_gqa), 2, 17, 17, 4, 2, d.causal_t17_gqa, 1}},
      {{"65x64 MQA" + dim_suffix(d.mqa), 2, 65, 64, 4, 1, d.mqa, 0}},
      {{"causal 64x130" + dim_suffix(d.keys_without_rows) + " (keys without rows)", 1, 64, 130, 2, 2,
        d.keys_without_rows, 1}},
      {{"causal 130x17" + dim_suffix(d.rows_without_keys) + " (rows without keys)", 1, 130, 17, 2, 1,
        d.rows_without_keys, 1}},
      {{"fp16 T65 GQA" + dim_suffix(d.fp16_gqa), 1, 65, 65, 4, 2, d.fp16_gqa, 0}, FLASHBOX_FLOAT16},
      {{"window(16,8) softcap 3 alibi/head 65x65" + dim_suffix(d.mods), 1, 65, 65, 2, 2, d.mods, 0, 16, 8, 3.0f,
        Alibi::head}},
  };
}

// Long: causal T = 1000 with GQA, T = 1000, 300 x 1000 MQA, causal 1000 x 300 (batch 2).
struct LongEdgeDims {
  int64_t causal_gqa, plain, mqa, causal_short_keys;
};
inline std::vector<BwdCase> long_edges(const LongEdgeDims &d) {
  return {
      {{"causal T1000 GQA" + dim_suffix(d.causal_gqa), 1, 1000, 1000, 4, 2, d.causal_gqa, 1}},
      {{"T1000" + dim_suffix(d.plain), 1, 1000, 1000, 2, 2, d.plain, 0}},
      {{"300x1000 MQA" + dim_suffix(d.mqa), 1, 300, 1000, 2, 1, d.mqa, 0}},
      {{"causal 1000x300" + dim_suffix(d.causal_short_keys), 2, 1000, 300, 2, 2, d.causal_short_keys, 1}},
  };
}

// The cases of a, then b's.
inline std::vector<BwdCase> concat(std::vector<BwdCase> a, const std::vector<BwdCase> &b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

enum class Size { small, large };

// A test's case loop: skips without an sm90 GPU (and a large set under FLASHBOX_SM90_MODS_SMALL=1),
// runs every case through `run(case, worst)` and prints the worst gradient error at the end.
template <class Run>
void run_cases(const std::vector<BwdCase> &cases, Size size, Run run) {
  std::string why;
  if (!have_hopper(why)) GTEST_SKIP() << why << ": the sm90 backward is not run";
  if (size == Size::large && small_only()) GTEST_SKIP() << "FLASHBOX_SM90_MODS_SMALL=1: small shapes only";
  Worst worst;
  for (const BwdCase &c : cases) run(c, worst);
}

// The same with run_case's kernel-name checks, the same for every case.
inline void run_cases(const std::vector<BwdCase> &cases, Size size, const char *kernel_atomic = "sm90",
                      const char *kernel_det = "sm90", const char *kernel_fwd = nullptr) {
  run_cases(cases, size,
            [&](const BwdCase &c, Worst &worst) { run_case(c, worst, kernel_atomic, kernel_det, kernel_fwd); });
}

}  // namespace flashbox::test::sm90_bwd
