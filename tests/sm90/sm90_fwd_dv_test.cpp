// The Hopper forward's kernel of its own for head_dim_v != head_dim: (head_dim, head_dim_v) =
// (192, 128), DeepSeek's prefill (FwdConfig's DV; tile_policy.hpp's dv_kernel), called through
// flashbox_attention_forward_ext with head_dim_v. o and lse against the fp64 CPU reference with
// head_dim_v (src/cpu/reference_fp64.hpp) on random bf16 / fp16 inputs with outliers in q and k (one
// value in 64 six times larger; seed printed, FLASHBOX_TEST_SEED=N repeats one): causal and not,
// T = 1, 17, 63, 64, 65, 1000, 4097, seqlen_q != seqlen_k both ways (causal rows without a key), GQA
// and MQA, sliding windows, learnable sinks, both schedules (grid and persistent), head dims 136..192
// with head_dim_v 8..128 on the same kernel (the TMA's zero fill past them), and row strides past
// head_dim_v (NaN in v's padding must not be read, o's padding must not be written). Outputs are
// poisoned (0xff: NaN) between guard bytes that must survive; NaN never passes. Every case checks
// flashbox_last_kernel(): the native kernel ran (cuda_flash_sm90_d192_dv128_...), not the column split
// of src/api/head_dim_v_split.hpp (whose name says "head_dim_v = "); the calls the native kernel
// declines (varlen, softcap, the sm80 family, another tuning tile) still run, split.
// Relative error ||got - ref|| / ||ref|| < 1e-2; lse within 2e-2 (exact -inf where no key is seen).
// Skipped, with the reason, without a compute capability 9.0 GPU.
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
#include "core/dtype.hpp"
#include "cpu/reference_fp64.hpp"
#include "cuda/forward/sm90/tile_policy.hpp"
#include "flashbox/flashbox.h"
#include "sm90/hopper_device.hpp"
#include "support/attention_case.hpp"
#include "support/device_buffers.hpp"
#include "support/ext_tensors.hpp"
#include "support/mods_case.hpp"
#include "support/output_error.hpp"

namespace flashbox::test::sm90_fwd_dv {
namespace {

#define SKIP_WITHOUT_HOPPER() \
  do { \
    std::string why; \
    if (!have_hopper(why)) GTEST_SKIP() << why; \
  } while (0)

constexpr const char *kNative = "cuda_flash_sm90_d192_dv128_128x128";

// Which pairs have the kernel of their own: the policy's one function (no GPU needed).
TEST(FwdDvPolicy, DvKernelTable) {
  static_assert(sm90::dv_kernel(192, 128) != nullptr && sm90::dv_kernel(192, 128)->head_dim_v == 128);
  static_assert(sm90::dv_kernel(136, 128) != nullptr && sm90::dv_kernel(160, 64) != nullptr);
  static_assert(sm90::dv_kernel(192, 8) != nullptr && sm90::dv_kernel(184, 120) != nullptr);
  static_assert(sm90::dv_kernel(192, 192) == nullptr, "head_dim_v = head_dim is no dv call");
  static_assert(sm90::dv_kernel(192, 136) == nullptr && sm90::dv_kernel(192, 132) == nullptr);
  static_assert(sm90::dv_kernel(128, 64) == nullptr && sm90::dv_kernel(256, 128) == nullptr);
  static_assert(sm90::dv_kernel(64, 512) == nullptr && sm90::dv_kernel(128, 256) == nullptr);
  EXPECT_EQ(sm90::dv_kernel(192, 128)->tile.bm, 128);
  EXPECT_EQ(sm90::dv_kernel(192, 128)->tile.bn, 128);
}

struct Case {
  ModsCase m;
  int64_t head_dim_v = 128;
  flashbox_dtype dtype = FLASHBOX_BFLOAT16;
  bool sinks = false;
  detail::Sm90Schedule schedule = detail::Sm90Schedule::policy;
  int64_t v_pad = 0, o_pad = 0;  // extra elements per row of v and o (NaN in v's, o's must stay poisoned)
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

// Runs the case on the GPU and checks it; returns the kernel name (empty when the call failed).
std::string run_case(const Case &c, bool expect_native = true) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(c.m.name + " seed " + std::to_string(seed) + " (FLASHBOX_TEST_SEED=" + std::to_string(seed) + ")");
  std::mt19937_64 rng(seed);
  ExtDraw draw{c.dtype, c.sinks, true};
  draw.head_dim_v = c.head_dim_v;
  const ExtTensors t(c.m, {}, {}, draw, rng);
  const int64_t hq = c.m.heads_q, hk = c.m.heads_kv, sq = c.m.seqlen_q, sk = c.m.seqlen_k, dv = c.head_dim_v;

  // The fp64 reference of the forward alone (the backward stays on the split path: not checked here).
  std::vector<double> ref_o, ref_lse;
  {
    flashbox_attention_args a = t.args();
    a.device = FLASHBOX_CPU;
    a.q = t.q.data(), a.k = t.k.data(), a.v = t.v.data();
    const core::ScoreMods m = t.mods();
    cpu::reference_attention_fp64(a, ref_o, &ref_lse, &m, dv);
  }

  const int64_t sv = dv + c.v_pad, so = dv + c.o_pad;
  const uint16_t nan16 = c.dtype == FLASHBOX_BFLOAT16 ? 0x7fc0 : 0x7e00;
  const std::vector<uint16_t> v_host = c.v_pad ? with_row_stride(t.v, dv, sv, nan16) : t.v;
  DeviceInput q(t.q.data(), t.q.size() * 2), k(t.k.data(), t.k.size() * 2), v(v_host.data(), v_host.size() * 2);
  DeviceInput sinks(t.sinks.data(), t.sinks.size() * 4);
  const size_t rows_q = size_t(t.total_q * hq);
  GuardedOutput o(rows_q * size_t(so) * 2), lse(rows_q * 4);
  EXPECT_TRUE(q.ptr && k.ptr && v.ptr && sinks.ptr && o.raw && lse.raw) << "device allocation";
  if (!(q.ptr && k.ptr && v.ptr && sinks.ptr && o.raw && lse.raw)) return "";

  flashbox_attention_args a = t.args();
  a.device = FLASHBOX_CUDA;
  a.q = q.ptr, a.k = k.ptr, a.v = v.ptr, a.o = o.ptr(), a.lse = static_cast<float *>(lse.ptr());
  const int64_t vs[3] = {sk * hk * sv, hk * sv, sv}, os[3] = {sq * hq * so, hq * so, so};
  std::copy_n(vs, 3, a.v_stride), std::copy_n(os, 3, a.o_stride);
  flashbox_attention_ext e = call_ext(t.c, nullptr);
  e.head_dim_v = dv;
  if (c.sinks) e.learnable_sink = static_cast<const float *>(sinks.ptr);

  detail::TuningOverrides pin = detail::tuning_overrides();
  pin.sm90_schedule = c.schedule;
  const detail::ScopedTuning scoped(pin);
  const int rc = flashbox_attention_forward_ext(&a, &e);
  EXPECT_EQ(rc, 0) << flashbox_last_error();
  if (rc != 0) return "";
  const std::string kernel = flashbox_last_kernel();
  if (expect_native) {
    EXPECT_EQ(kernel.rfind(kNative, 0), 0u) << "not the native kernel: " << kernel;
    EXPECT_EQ(kernel.find("head_dim_v ="), std::string::npos) << "the column split ran: " << kernel;
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess) << cudaGetErrorString(cudaGetLastError());

  std::vector<uint16_t> o_host(rows_q * size_t(so));
  std::vector<float> lse_host(rows_q);
  EXPECT_TRUE(o.back(o_host.data())) << "a guard byte around o changed (write out of bounds; " << kernel << ")";
  EXPECT_TRUE(lse.back(lse_host.data())) << "a guard byte around lse changed (" << kernel << ")";
  std::vector<uint16_t> o_dense(rows_q * size_t(dv));
  bool padding_kept = true;
  for (size_t r = 0; r < rows_q; ++r) {
    std::copy_n(o_host.begin() + r * so, dv, o_dense.begin() + r * dv);
    for (int64_t j = dv; j < so; ++j) padding_kept &= o_host[r * so + j] == 0xffff;
  }
  EXPECT_TRUE(padding_kept) << "o written past head_dim_v in a row (" << kernel << ")";
  const RelError eo = rel_error(to_double(o_dense, c.dtype), ref_o);
  EXPECT_FALSE(eo.nan) << "o has NaN or inf (" << kernel << ")";
  EXPECT_LT(eo.rel_or_inf(), 1e-2) << "o, max abs error " << eo.max_abs << " (" << kernel << ")";
  const LseError el = lse_error(lse_host.data(), ref_lse, LseRule::minus_inf_where_reference_is);
  EXPECT_EQ(el.bad, 0) << "lse entries with the wrong finiteness (" << kernel << ")";
  EXPECT_LT(el.max_abs, 2e-2) << "lse (" << kernel << ")";
  std::printf("  %-60s rel %.2e  lse %.1e  %s  seed %llu\n", c.m.name.c_str(), eo.rel, el.max_abs, kernel.c_str(),
              static_cast<unsigned long long>(seed));
  return kernel;
}

// T = seqlen_q = seqlen_k around the 128-row and 128-key tiles, causal and not, both dtypes; GQA.
TEST(FwdDvSm90, Lengths) {
  SKIP_WITHOUT_HOPPER();
  for (const int64_t T : {1, 17, 63, 64, 65, 1000})
    for (int causal = 0; causal <= 1; ++causal) {
      run_case(make("T" + std::to_string(T) + " GQA", 2, T, T, 4, 2, causal));
      run_case(make("T" + std::to_string(T), 1, T, T, 2, 2, causal, FLASHBOX_FLOAT16));
    }
}

// A long sequence (a tile's walk over 33 key blocks; the causal one persistent by the policy).
TEST(FwdDvSm90, Length4097) {
  SKIP_WITHOUT_HOPPER();
  for (int causal = 0; causal <= 1; ++causal) {
    run_case(make("T4097 MQA", 1, 4097, 4097, 2, 1, causal));
    run_case(make("T4097", 1, 4097, 4097, 1, 1, causal, FLASHBOX_FLOAT16));
  }
}

// seqlen_q != seqlen_k both ways (causal 300 x 65 leaves rows without a key: o = 0, lse = -inf).
TEST(FwdDvSm90, SeqlenQNotK) {
  SKIP_WITHOUT_HOPPER();
  for (int causal = 0; causal <= 1; ++causal) {
    run_case(make("1x1000 GQA", 2, 1, 1000, 4, 2, causal));
    run_case(make("65x300 MQA", 1, 65, 300, 4, 1, causal, FLASHBOX_FLOAT16));
    run_case(make("300x65 (keyless rows when causal)", 2, 300, 65, 2, 2, causal));
    run_case(make("1000x17 GQA", 1, 1000, 17, 4, 2, causal, FLASHBOX_FLOAT16));
  }
}

// Both schedules whatever the policy picks: one CTA per tile and the persistent grid.
TEST(FwdDvSm90, Schedules) {
  SKIP_WITHOUT_HOPPER();
  for (const detail::Sm90Schedule s : {detail::Sm90Schedule::grid, detail::Sm90Schedule::persistent})
    for (int causal = 0; causal <= 1; ++causal) {
      Case c = make(std::string(s == detail::Sm90Schedule::grid ? "grid" : "persistent") + " 700x900 GQA", 2, 700, 900,
                    4, 2, causal, causal ? FLASHBOX_FLOAT16 : FLASHBOX_BFLOAT16);
      c.schedule = s;
      const std::string kernel = run_case(c);
      EXPECT_EQ(kernel.find("_persistent") != std::string::npos, s == detail::Sm90Schedule::persistent) << kernel;
    }
}

// Sliding windows: left only, both sides, causal with a left edge; a window wider than the keys.
TEST(FwdDvSm90, Windows) {
  SKIP_WITHOUT_HOPPER();
  struct W {
    int left, right, causal;
  };
  for (const W w : {W{64, -1, 0}, W{100, 30, 0}, W{32, 0, 1}, W{200, -1, 1}, W{5000, 5000, 0}})
    for (const flashbox_dtype dtype : {FLASHBOX_BFLOAT16, FLASHBOX_FLOAT16}) {
      Case c = make("window(" + std::to_string(w.left) + "," + std::to_string(w.right) + ") 513x700 GQA", 2, 513, 700,
                    4, 2, w.causal, dtype);
      c.m.window_left = w.left, c.m.window_right = w.causal ? 0 : w.right;
      run_case(c);
    }
}

// Learnable sinks (head 0's far above the scores, head 2's far below), with keyless rows.
TEST(FwdDvSm90, Sinks) {
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
TEST(FwdDvSm90, SmallerDims) {
  SKIP_WITHOUT_HOPPER();
  struct Dims {
    int64_t d, dv;
  };
  for (const Dims x : {Dims{136, 128}, Dims{160, 128}, Dims{192, 64}, Dims{192, 120}, Dims{176, 8}, Dims{184, 72}})
    for (int causal = 0; causal <= 1; ++causal)
      run_case(make("T130 GQA", 2, 130, 130, 4, 2, causal, causal ? FLASHBOX_FLOAT16 : FLASHBOX_BFLOAT16, x.d, x.dv));
}

// v and o with rows longer than head_dim_v: v's padding (NaN) is never read, o's never written.
TEST(FwdDvSm90, RowStrides) {
  SKIP_WITHOUT_HOPPER();
  for (int causal = 0; causal <= 1; ++causal) {
    Case c = make("padded rows 129x200 GQA", 2, 129, 200, 4, 2, causal);
    c.v_pad = 64, c.o_pad = 32;
    run_case(c);
    Case s = make("padded rows dv 96 T77", 1, 77, 77, 2, 1, causal, FLASHBOX_FLOAT16, 192, 96);
    s.v_pad = 8, s.o_pad = 40;
    run_case(s);
  }
}

// The calls the native kernel does not take still run, on the column split (its name says so).
TEST(FwdDvSm90, DeclinedCallsSplit) {
  SKIP_WITHOUT_HOPPER();
  const auto expect_split = [](const std::string &kernel, const char *prefix) {
    EXPECT_NE(kernel.find("head_dim_v = 128"), std::string::npos) << kernel;
    EXPECT_EQ(kernel.rfind(prefix, 0), 0u) << kernel;
  };
  {
    SCOPED_TRACE("family sm80");
    detail::TuningOverrides pin = detail::tuning_overrides();
    pin.forward_family = FLASHBOX_FAMILY_SM80;
    const detail::ScopedTuning scoped(pin);
    expect_split(run_case(make("sm80 T65", 1, 65, 65, 2, 2, 1), false), "cuda_flash_sm80_");
  }
  {
    SCOPED_TRACE("tuning tile 128x112 (the 192 kernel's)");
    detail::TuningOverrides pin = detail::tuning_overrides();
    pin.sm90_tile_m = 128, pin.sm90_tile_n = 112;
    const detail::ScopedTuning scoped(pin);
    expect_split(run_case(make("tile 128x112 T300", 1, 300, 300, 2, 2, 0), false), "cuda_flash_sm90_d192_128x112");
  }
  {
    SCOPED_TRACE("softcap");
    Case c = make("softcap 30 T200", 1, 200, 200, 2, 2, 1);
    c.m.softcap = 30.0f;
    expect_split(run_case(c, false), "cuda_flash_sm80_");
  }
}

}  // namespace
}  // namespace flashbox::test::sm90_fwd_dv

#undef SKIP_WITHOUT_HOPPER
