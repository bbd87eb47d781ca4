// The Hopper backward's kernel of its own for head_dim_v != head_dim: (head_dim, head_dim_v) =
// (192, 128), DeepSeek's prefill (BwdSm90Traits::head_dim_v; the pairs are sm90::dv_kernel's, the
// forward's decision), called through flashbox_attention_backward_ext with head_dim_v on the GPU
// forward's own o and lse (the native (192, 128) forward). dq, dk, dv (and dsink with learnable
// sinks) against the fp64 CPU reference backward with head_dim_v (src/cpu/reference_backward_fp64.hpp,
// through support/ext_tensors.hpp) on random bf16 / fp16 inputs with outliers in q and k (seed
// printed, FLASHBOX_TEST_SEED=N repeats one): causal and not, T = 1, 17, 63, 64, 65, 1000, 4097,
// seqlen_q != seqlen_k both ways (causal rows without a key), GQA and MQA, sliding windows, softcap
// and ALiBi (the d192 kernel's fused pass), sinks, head dims 136..192 with head_dim_v 8..128 on the
// same kernel, dout and dv with rows past head_dim_v (dv's padding never written). Gradients are
// poisoned (0xff: NaN) between guard bytes that must survive; NaN never passes. Every case checks
// flashbox_last_kernel(): the native backward ran (cuda_flash_bwd_sm90_d192_dv128...), not the column
// split of src/api/head_dim_v_split.hpp (whose name says "head_dim_v = "); the calls it declines
// (deterministic mode, variable-length batches, the sm80 family) still run, split.
// Relative error ||got - ref|| / ||ref|| < 1e-2. Skipped, with the reason, without a compute
// capability 9.0 GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "api/tuning.hpp"
#include "core/backends.hpp"
#include "core/dtype.hpp"
#include "core/problem.hpp"
#include "cuda/backward/sm90/bwd_route.hpp"
#include "cuda/hopper/tma_host.hpp"
#include "flashbox/flashbox.h"
#include "sm90/hopper_device.hpp"
#include "support/attention_case.hpp"
#include "support/device_buffers.hpp"
#include "support/ext_tensors.hpp"
#include "support/mods_case.hpp"
#include "support/output_error.hpp"

namespace flashbox::test::sm90_bwd_dv {
namespace {

#define SKIP_WITHOUT_HOPPER() \
  do { \
    std::string why; \
    if (!have_hopper(why)) GTEST_SKIP() << why; \
  } while (0)

constexpr const char *kNative = "cuda_flash_bwd_sm90_d192_dv128";

// Which calls have the backward of their own: bwd_route.hpp's one function over dv_kernel (no GPU).
TEST(BwdDvPolicy, KernelHeadDimV) {
  using sm90::bwd::bwd_kernel_head_dim_v;
  static_assert(bwd_kernel_head_dim_v(192, 192, 128) == 128 && bwd_kernel_head_dim_v(192, 136, 128) == 128);
  static_assert(bwd_kernel_head_dim_v(192, 160, 64) == 128 && bwd_kernel_head_dim_v(192, 184, 8) == 128);
  static_assert(bwd_kernel_head_dim_v(192, 192, 192) == 0, "head_dim_v = head_dim is no dv call");
  static_assert(bwd_kernel_head_dim_v(192, 192, 136) == 0 && bwd_kernel_head_dim_v(192, 192, 132) == 0);
  static_assert(bwd_kernel_head_dim_v(128, 128, 64) == 0 && bwd_kernel_head_dim_v(256, 256, 128) == 0);
  static_assert(bwd_kernel_head_dim_v(64, 64, 512) == 0);
  EXPECT_EQ(bwd_kernel_head_dim_v(192, 192, 128), 128);
}

// The plan (size only: no buffers are read): the pair's kernel by name on a Hopper device; head_dim_v
// outside the pair, deterministic mode and variable-length batches declined (code 0: src/api splits).
TEST(BwdDvPolicy, PlanTakesThePair) {
  const int64_t B = 2, T = 64, HQ = 4, HK = 2;
  std::vector<uint16_t> buf(size_t(B * T * HQ * 192));
  std::vector<float> lse(size_t(B * HQ * T));
  const auto grad = [&](int64_t d, int64_t dv, int deterministic) {
    flashbox_attention_grad_args g{};
    flashbox_attention_args &a = g.fwd;
    a.device = FLASHBOX_CUDA, a.dtype = FLASHBOX_BFLOAT16, a.impl = FLASHBOX_AUTO;
    a.batch = B, a.seqlen_q = a.seqlen_k = T, a.heads_q = HQ, a.heads_kv = HK, a.head_dim = d;
    a.q = a.k = a.v = buf.data(), a.o = buf.data(), a.lse = lse.data();
    const int64_t qs[3] = {T * HQ * d, HQ * d, d}, ks[3] = {T * HK * d, HK * d, d};
    const int64_t os[3] = {T * HQ * dv, HQ * dv, dv}, vs[3] = {T * HK * dv, HK * dv, dv};
    std::copy_n(qs, 3, a.q_stride), std::copy_n(os, 3, a.o_stride);
    std::copy_n(ks, 3, a.k_stride), std::copy_n(vs, 3, a.v_stride);
    g.dout = buf.data(), g.dq = buf.data(), g.dk = buf.data(), g.dv = buf.data();
    std::copy_n(os, 3, g.dout_stride), std::copy_n(qs, 3, g.dq_stride);
    std::copy_n(ks, 3, g.dk_stride), std::copy_n(vs, 3, g.dv_stride);
    g.deterministic = deterministic;
    detail::GradProblem p = detail::make_grad_problem(g);
    p.fwd.head_dim_v = dv;
    return p;
  };
  const bool hopper = sm90::sm90_unavailable_reason() == nullptr;
  for (const int64_t d : {136, 192}) {
    const detail::PlanResult r = detail::plan_sm90_backward(grad(d, 128, 0), /*size_only=*/true);
    EXPECT_EQ(r.code, 0) << r.why_not;
    if (hopper) {
      ASSERT_TRUE(r.plan.has_value()) << r.why_not;
      EXPECT_EQ(r.plan->kernel, kNative) << "d" << d;
    }
  }
  const detail::PlanResult wide = detail::plan_sm90_backward(grad(192, 136, 0), /*size_only=*/true);
  EXPECT_FALSE(wide.plan.has_value());
  EXPECT_EQ(wide.code, 0) << wide.why_not;
  EXPECT_NE(wide.why_not.find("with head_dim_v 136"), std::string::npos) << wide.why_not;
  const detail::PlanResult det = detail::plan_sm90_backward(grad(192, 128, 1), /*size_only=*/true);
  EXPECT_FALSE(det.plan.has_value());
  EXPECT_EQ(det.code, 0) << det.why_not;
}

struct Case {
  ModsCase m;
  int64_t head_dim_v = 128;
  flashbox_dtype dtype = FLASHBOX_BFLOAT16;
  bool sinks = false;
  int deterministic = 0;
  int64_t row_pad = 0;  // extra elements per row of dout and dv (dv's padding must stay poisoned)
};

Case make(std::string name, int64_t batch, int64_t sq, int64_t sk, int64_t hq, int64_t hk, int causal,
          flashbox_dtype dtype = FLASHBOX_BFLOAT16, int64_t d = 192, int64_t dv = 128) {
  Case c;
  c.m.name = name + " d" + std::to_string(d) + "/dv" + std::to_string(dv) +
             (dtype == FLASHBOX_FLOAT16 ? " fp16" : " bf16") + (causal ? " causal" : "");
  c.m.batch = batch, c.m.seqlen_q = sq, c.m.seqlen_k = sk, c.m.heads_q = hq, c.m.heads_kv = hk;
  c.m.head_dim = d, c.m.causal = causal;
  c.head_dim_v = dv, c.dtype = dtype;
  return c;
}

// A dense [rows, width] 16-bit tensor with a row stride of `stride` >= width, the padding `fill`.
std::vector<uint16_t> with_row_stride(const std::vector<uint16_t> &dense, int64_t width, int64_t stride,
                                      uint16_t fill) {
  const int64_t rows = int64_t(dense.size()) / width;
  std::vector<uint16_t> out(size_t(rows * stride), fill);
  for (int64_t r = 0; r < rows; ++r) std::copy_n(dense.begin() + r * width, width, out.begin() + r * stride);
  return out;
}

void expect_close(const char *name, const std::vector<uint16_t> &got, const std::vector<double> &ref,
                  flashbox_dtype dtype, const std::string &kernel) {
  const RelError e = rel_error(to_double(got, dtype), ref);
  EXPECT_FALSE(e.nan) << name << " has NaN or inf (" << kernel << ")";
  EXPECT_LT(e.rel_or_inf(), 1e-2) << name << ", max abs error " << e.max_abs << " (" << kernel << ")";
}

// Runs the case's forward and backward on the GPU and checks the gradients; returns the backward's
// kernel name (empty when a call failed). expect_native: the name must be the native kernel's, else
// the split's.
std::string run_case(const Case &c, bool expect_native = true) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(c.m.name + " seed " + std::to_string(seed) + " (FLASHBOX_TEST_SEED=" + std::to_string(seed) + ")");
  std::mt19937_64 rng(seed);
  ExtDraw draw{c.dtype, c.sinks, true};
  draw.head_dim_v = c.head_dim_v;
  const ExtTensors t(c.m, {}, {}, draw, rng);
  const ExtReference ref = ext_reference(t);
  const int64_t hq = c.m.heads_q, hk = c.m.heads_kv, sq = c.m.seqlen_q, sk = c.m.seqlen_k, dv = c.head_dim_v;
  const int64_t sp = dv + c.row_pad;  // dout's and dv's row stride
  const size_t rows_q = size_t(t.total_q * hq), rows_k = size_t(t.total_k * hk);

  const uint16_t nan16 = c.dtype == FLASHBOX_BFLOAT16 ? 0x7fc0 : 0x7e00;
  const std::vector<uint16_t> dout_host = c.row_pad ? with_row_stride(t.dout, dv, sp, nan16) : t.dout;
  DeviceInput q(t.q.data(), t.q.size() * 2), k(t.k.data(), t.k.size() * 2), v(t.v.data(), t.v.size() * 2);
  DeviceInput dout(dout_host.data(), dout_host.size() * 2);
  DeviceInput slopes(t.slopes.data(), t.slopes.size() * 4), sinks(t.sinks.data(), t.sinks.size() * 4);
  GuardedOutput o(rows_q * size_t(dv) * 2), lse(rows_q * 4);
  EXPECT_TRUE(q.ptr && k.ptr && v.ptr && dout.ptr && slopes.ptr && sinks.ptr && o.raw && lse.raw)
      << "device allocation";
  if (!(q.ptr && k.ptr && v.ptr && dout.ptr && slopes.ptr && sinks.ptr && o.raw && lse.raw)) return "";

  flashbox_attention_args a = t.args();
  a.device = FLASHBOX_CUDA;
  a.q = q.ptr, a.k = k.ptr, a.v = v.ptr, a.o = o.ptr(), a.lse = static_cast<float *>(lse.ptr());
  flashbox_attention_ext e = call_ext(t.c, slopes.ptr);
  e.head_dim_v = dv;
  if (c.sinks) e.learnable_sink = static_cast<const float *>(sinks.ptr);
  int rc = flashbox_attention_forward_ext(&a, &e);
  EXPECT_EQ(rc, 0) << flashbox_last_error();
  if (rc != 0) return "";
  const std::string fwd_kernel = flashbox_last_kernel();

  GuardedOutput dq(t.q.size() * 2), dk(t.k.size() * 2), dvg(rows_k * size_t(sp) * 2), dsink(size_t(hq) * 4);
  EXPECT_TRUE(dq.raw && dk.raw && dvg.raw && dsink.raw) << "device allocation";
  if (!(dq.raw && dk.raw && dvg.raw && dsink.raw)) return "";
  flashbox_attention_grad_args g = grad_args_like(a, dout.ptr, dq.ptr(), dk.ptr(), dvg.ptr(), c.deterministic);
  const int64_t ds[3] = {sq * hq * sp, hq * sp, sp}, vs[3] = {sk * hk * sp, hk * sp, sp};
  std::copy_n(ds, 3, g.dout_stride), std::copy_n(vs, 3, g.dv_stride);
  flashbox_attention_ext be = e;
  if (c.sinks) be.dsink = static_cast<float *>(dsink.ptr());
  rc = flashbox_attention_backward_ext(&g, &be);
  EXPECT_EQ(rc, 0) << flashbox_last_error();
  if (rc != 0) return "";
  const std::string kernel = flashbox_last_kernel();
  if (expect_native) {
    EXPECT_EQ(kernel.rfind(kNative, 0), 0u) << "not the native backward: " << kernel;
    EXPECT_EQ(kernel.find("head_dim_v ="), std::string::npos) << "the column split ran: " << kernel;
  } else {
    EXPECT_NE(kernel.find("head_dim_v = " + std::to_string(dv)), std::string::npos) << "not the split: " << kernel;
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess) << cudaGetErrorString(cudaGetLastError());

  std::vector<uint16_t> h_dq(t.q.size()), h_dk(t.k.size()), h_dv_padded(rows_k * size_t(sp));
  std::vector<float> h_dsink(static_cast<size_t>(hq));
  EXPECT_TRUE(dq.back(h_dq.data())) << "a guard byte around dq changed (" << kernel << ")";
  EXPECT_TRUE(dk.back(h_dk.data())) << "a guard byte around dk changed (" << kernel << ")";
  EXPECT_TRUE(dvg.back(h_dv_padded.data())) << "a guard byte around dv changed (" << kernel << ")";
  EXPECT_TRUE(dsink.back(h_dsink.data())) << "a guard byte around dsink changed (" << kernel << ")";
  std::vector<uint16_t> h_dv(rows_k * size_t(dv));
  bool padding_kept = true;
  for (size_t r = 0; r < rows_k; ++r) {
    std::copy_n(h_dv_padded.begin() + r * sp, dv, h_dv.begin() + r * dv);
    for (int64_t j = dv; j < sp; ++j) padding_kept &= h_dv_padded[r * sp + j] == 0xffff;
  }
  EXPECT_TRUE(padding_kept) << "dv written past head_dim_v in a row (" << kernel << ")";
  expect_close("dq", h_dq, ref.dq, c.dtype, kernel);
  expect_close("dk", h_dk, ref.dk, c.dtype, kernel);
  expect_close("dv", h_dv, ref.dv, c.dtype, kernel);
  if (c.sinks) {
    const HostDsink scale = host_dsink(
        t, [&](int64_t i) { return ref.o[size_t(i)]; }, [&](int64_t i) { return ref.lse[size_t(i)]; });
    for (int64_t h = 0; h < hq; ++h) {
      const double got = h_dsink[size_t(h)];
      EXPECT_TRUE(std::isfinite(got)) << "dsink[" << h << "] = " << got << " (" << kernel << ")";
      EXPECT_LT(std::fabs(got - ref.dsink[size_t(h)]), 1e-2 * std::max(scale.products[size_t(h)], 1e-30))
          << "dsink[" << h << "] = " << got << ", reference " << ref.dsink[size_t(h)] << " (" << kernel << ")";
    }
  }
  std::printf("  %-60s %s / %s  seed %llu\n", c.m.name.c_str(), fwd_kernel.c_str(), kernel.c_str(),
              static_cast<unsigned long long>(seed));
  return kernel;
}

// T = seqlen_q = seqlen_k around the 64-key and 64-query blocks, causal and not, both dtypes; GQA.
TEST(BwdDvSm90, Lengths) {
  SKIP_WITHOUT_HOPPER();
  for (const int64_t T : {1, 17, 63, 64, 65})
    for (int causal = 0; causal <= 1; ++causal) {
      run_case(make("T" + std::to_string(T) + " GQA", 2, T, T, 4, 2, causal));
      run_case(make("T" + std::to_string(T), 1, T, T, 2, 2, causal, FLASHBOX_FLOAT16));
    }
}

// Long sequences (the fp64 reference's cost keeps them few and narrow).
TEST(BwdDvSm90, LongLengths) {
  SKIP_WITHOUT_HOPPER();
  for (int causal = 0; causal <= 1; ++causal) {
    run_case(make("T1000 GQA", 1, 1000, 1000, 4, 2, causal, causal ? FLASHBOX_FLOAT16 : FLASHBOX_BFLOAT16));
    run_case(make("T4097 MQA", 1, 4097, 4097, 2, 1, causal));
  }
}

// seqlen_q != seqlen_k both ways (causal 300 x 65 leaves rows without a key: their gradients are 0).
TEST(BwdDvSm90, SeqlenQNotK) {
  SKIP_WITHOUT_HOPPER();
  for (int causal = 0; causal <= 1; ++causal) {
    run_case(make("1x700 GQA", 2, 1, 700, 4, 2, causal));
    run_case(make("65x300 MQA", 1, 65, 300, 4, 1, causal, FLASHBOX_FLOAT16));
    run_case(make("300x65 (keyless rows when causal)", 2, 300, 65, 2, 2, causal));
  }
}

// Sliding windows (left only, both sides, causal with a left edge, wider than the keys); softcap and
// ALiBi (the fused pass of the d192 layout).
TEST(BwdDvSm90, WindowsAndTransforms) {
  SKIP_WITHOUT_HOPPER();
  struct W {
    int left, right, causal;
  };
  for (const W w : {W{64, -1, 0}, W{100, 30, 0}, W{32, 0, 1}, W{5000, 5000, 0}}) {
    Case c = make("window(" + std::to_string(w.left) + "," + std::to_string(w.right) + ") 333x400 GQA", 2, 333, 400, 4,
                  2, w.causal, w.causal ? FLASHBOX_FLOAT16 : FLASHBOX_BFLOAT16);
    c.m.window_left = w.left, c.m.window_right = w.causal ? 0 : w.right;
    run_case(c);
  }
  Case s = make("softcap 30 T200", 1, 200, 200, 2, 2, 1);
  s.m.softcap = 30.0f;
  run_case(s);
  Case a = make("alibi/head T130 GQA", 1, 130, 130, 4, 2, 0, FLASHBOX_FLOAT16);
  a.m.alibi = Alibi::head;
  run_case(a);
}

// Learnable sinks and their gradient (dsink from prepare's rowsum over head_dim_v), with keyless rows.
TEST(BwdDvSm90, Sinks) {
  SKIP_WITHOUT_HOPPER();
  for (int causal = 0; causal <= 1; ++causal) {
    Case c = make("sinks 200x130 GQA", 2, 200, 130, 4, 2, causal);
    c.sinks = true;
    run_case(c);
    Case w = make("sinks window(40,0) T333", 1, 333, 333, 4, 4, causal, FLASHBOX_FLOAT16);
    w.m.window_left = 40, w.m.window_right = 0, w.sinks = true;
    run_case(w);
  }
}

// Head dims 136..192 and head_dim_v 8..128 on the same kernel: the maps end at the call's dims.
TEST(BwdDvSm90, SmallerDims) {
  SKIP_WITHOUT_HOPPER();
  struct Dims {
    int64_t d, dv;
  };
  for (const Dims x : {Dims{136, 128}, Dims{160, 128}, Dims{192, 64}, Dims{192, 120}, Dims{176, 8}, Dims{184, 72}})
    for (int causal = 0; causal <= 1; ++causal)
      run_case(make("T130 GQA", 2, 130, 130, 4, 2, causal, causal ? FLASHBOX_FLOAT16 : FLASHBOX_BFLOAT16, x.d, x.dv));
}

// dout and dv with rows longer than head_dim_v: dout's padding (NaN) is never read, dv's never written.
TEST(BwdDvSm90, RowStrides) {
  SKIP_WITHOUT_HOPPER();
  for (int causal = 0; causal <= 1; ++causal) {
    Case c = make("padded rows 129x200 GQA", 2, 129, 200, 4, 2, causal);
    c.row_pad = 64;
    run_case(c);
    Case s = make("padded rows dv 96 T77", 1, 77, 77, 2, 1, causal, FLASHBOX_FLOAT16, 192, 96);
    s.row_pad = 40;
    run_case(s);
  }
}

// The calls the native backward does not take still run, on the column split (its name says so):
// deterministic mode (the d192 layout's dQ adds are unordered) and the sm80 family.
TEST(BwdDvSm90, DeclinedCallsSplit) {
  SKIP_WITHOUT_HOPPER();
  {
    SCOPED_TRACE("deterministic");
    Case c = make("deterministic T130 GQA", 1, 130, 130, 4, 2, 1);
    c.deterministic = 1;
    const std::string kernel = run_case(c, false);
    EXPECT_NE(kernel.find("deterministic"), std::string::npos) << kernel;
  }
  {
    SCOPED_TRACE("family sm80");
    detail::TuningOverrides pin = detail::tuning_overrides();
    pin.backward_family = FLASHBOX_FAMILY_SM80;
    const detail::ScopedTuning scoped(pin);
    const std::string kernel = run_case(make("sm80 T65", 1, 65, 65, 2, 2, 0), false);
    EXPECT_EQ(kernel.rfind("cuda_flash_bwd_sm80_", 0), 0u) << kernel;
  }
}

}  // namespace
}  // namespace flashbox::test::sm90_bwd_dv

#undef SKIP_WITHOUT_HOPPER
