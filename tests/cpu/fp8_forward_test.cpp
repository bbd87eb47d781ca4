// The fp8 e4m3 forward of flashbox_attention_ext on the CPU levels (naive and blocked): q, k, v
// quantized from normals with outliers in q and k, under descales per tensor and per (batch entry, kv
// head), o in bf16 or fp16, against the fp64 reference on the dequantized inputs (support/mask_case.hpp;
// fresh seeds, printed): T = 1, 17, 65, 1000 (200 in the sanitizer build: support/sanitizer_build.hpp),
// seqlen_q != seqlen_k, GQA and MQA, causal and not, windows, softcap, ALiBi, sinks, varlen with
// lengths 0 and 1, seqused, num_splits. Against FlashAttention-3's same-precision emulation
// (support/fp8_emulation.hpp) the error must be within twice the emulation's plus the output's
// rounding, FA3's rule; and where the dequantized values are bf16 numbers the fp8 call gives the bf16
// call's o bit for bit. The refusals are in tests/api/fp8_args_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/float8.hpp"
#include "core/masks.hpp"
#include "support/fp8_emulation.hpp"
#include "support/mask_case.hpp"
#include "support/sanitizer_build.hpp"

using flashbox::test::check_cpu_levels;
using flashbox::test::MaskCase;
using flashbox::test::MaskData;
using flashbox::test::unless_sanitized;
namespace cpu = flashbox::cpu;
namespace core = flashbox::core;

namespace {

MaskCase fp8_case(int64_t batch, int64_t sq, int64_t sk, int64_t hq, int64_t hkv, int64_t d, int causal) {
  MaskCase c;
  c.dtype = FLASHBOX_FLOAT8_E4M3;
  c.batch = batch, c.seqlen_q = sq, c.seqlen_k = sk, c.heads_q = hq, c.heads_kv = hkv, c.head_dim = d;
  c.causal = causal;
  return c;
}

TEST(Fp8Forward, SequenceLengths) {
  for (int64_t t : {1, 17, 65})
    for (int causal : {0, 1}) check_cpu_levels(fp8_case(2, t, t, 4, 2, 32, causal), false);
  const int64_t long_t = unless_sanitized<int64_t>(1000, 200);  // several 64-row tiles, the last partial
  for (int causal : {0, 1}) check_cpu_levels(fp8_case(1, long_t, long_t, 2, 1, 64, causal), false);
}

TEST(Fp8Forward, SeqlenQDiffersFromSeqlenK) {
  for (int causal : {0, 1}) {
    check_cpu_levels(fp8_case(2, 17, 65, 2, 2, 16, causal), false);
    check_cpu_levels(fp8_case(2, 65, 17, 2, 2, 16, causal), false);  // causal: early rows see no key
  }
}

TEST(Fp8Forward, GqaAndMqa) {
  for (int64_t hkv : {3, 1})
    for (int causal : {0, 1}) check_cpu_levels(fp8_case(2, 40, 56, 6, hkv, 24, causal), false);
}

TEST(Fp8Forward, DescaleShapesAndOutputDtypes) {
  for (auto ds : {MaskCase::Descale::none, MaskCase::Descale::tensor, MaskCase::Descale::head})
    for (flashbox_dtype out : {FLASHBOX_BFLOAT16, FLASHBOX_FLOAT16})
      for (bool outliers : {false, true}) {
        MaskCase c = fp8_case(3, 33, 47, 4, 2, 40, 1);
        c.descale = ds, c.out_dtype = out, c.outliers = outliers;
        check_cpu_levels(c, false);
      }
}

TEST(Fp8Forward, WindowsAndTransforms) {
  const int32_t windows[][2] = {{8, 0}, {4, 4}, {-1, 3}, {0, 0}};
  for (const auto &w : windows) {
    MaskCase c = fp8_case(2, 65, 65, 4, 2, 32, 0);
    c.window_left = w[0], c.window_right = w[1];
    check_cpu_levels(c, false);
  }
  MaskCase c = fp8_case(2, 50, 70, 4, 1, 32, 1);
  c.softcap = 5.0f, c.alibi = 2, c.sink = true;
  check_cpu_levels(c, false);
  c.softcap = 0.0f, c.alibi = 1, c.sink = false, c.attention_chunk = 16;
  check_cpu_levels(c, false);
}

TEST(Fp8Forward, VariableLengthAndSeqused) {
  for (int causal : {0, 1}) {
    MaskCase c = fp8_case(0, 0, 0, 4, 2, 32, causal);
    c.lens_q = {0, 1, 17, 40, 1}, c.lens_k = {3, 0, 1, 65, 1};  // lengths 0 and 1 on both sides
    check_cpu_levels(c, false);
    c.used_q = {0, 1, 9, 40, 0}, c.used_k = {2, 0, 1, 30, 1};
    check_cpu_levels(c, false);
  }
  MaskCase c = fp8_case(3, 20, 30, 2, 1, 16, 1);
  c.used_q = {20, 7, 0}, c.used_k = {30, 1, 12};
  check_cpu_levels(c, false);
}

TEST(Fp8Forward, NumSplits) {
  MaskData d(fp8_case(2, 33, 100, 4, 2, 32, 1));
  SCOPED_TRACE(d.name());
  d.ext_mut().num_splits = 3;
  for (flashbox_impl impl : {FLASHBOX_NAIVE, FLASHBOX_BLOCKED}) {
    ASSERT_EQ(d.forward(impl), FLASHBOX_OK) << flashbox_last_error();
    EXPECT_LT(d.o_error().rel, d.tolerance());
    EXPECT_LT(d.lse_error(), 1e-3);
    EXPECT_NE(std::string(flashbox_last_kernel()).find("fp8e4m3"), std::string::npos) << flashbox_last_kernel();
  }
}

// FlashAttention-3's rule: max |o - ref| <= 2 max |emulation - ref| + the output's own rounding
// (max |out_dtype(ref) - ref|), with ref the fp64 attention of the dequantized inputs.
TEST(Fp8Forward, WithinTwiceTheSamePrecisionEmulation) {
  struct Shape {
    int64_t b, sq, sk, hq, hkv, d;
    int causal, wl, wr;
  };
  const int64_t long_t = unless_sanitized<int64_t>(1000, 200), sq = unless_sanitized<int64_t>(300, 130),
                sk = unless_sanitized<int64_t>(500, 190);
  const Shape shapes[] = {{2, 65, 65, 4, 2, 64, 0, -1, -1},
                          {2, 65, 65, 4, 2, 64, 1, -1, -1},
                          {1, long_t, long_t, 2, 1, 128, 1, -1, -1},
                          {1, sq, sk, 2, 2, 64, 0, -1, -1},
                          {2, 100, 100, 4, 4, 32, 0, 16, 16}};
  for (const Shape &s : shapes)
    for (auto ds : {MaskCase::Descale::tensor, MaskCase::Descale::head}) {
      MaskCase c = fp8_case(s.b, s.sq, s.sk, s.hq, s.hkv, s.d, s.causal);
      c.window_left = s.wl, c.window_right = s.wr, c.descale = ds;
      MaskData d(c);
      SCOPED_TRACE(d.name());
      core::ScoreMods m = core::causal_mods(s.causal);
      m.window_left = s.wl;
      if (!s.causal) m.window_right = s.wr;
      const flashbox::test::Fp8Shape shape{s.b, s.sq, s.sk, s.hq, s.hkv, s.d, float(1.0 / std::sqrt(double(s.d)))};
      const std::vector<double> emu =
          flashbox::test::fp8_same_precision_attention(d.dequantized(0), d.dequantized(1), d.dequantized(2), shape, m,
                                                       c.out_dtype);
      const std::vector<double> &ref = d.reference_o();
      double emu_err = 0, rounding = 0;
      for (size_t i = 0; i < ref.size(); ++i) {
        emu_err = std::max(emu_err, std::abs(emu[i] - ref[i]));
        rounding = std::max(rounding, std::abs(double(cpu::round_to_dtype(float(ref[i]), c.out_dtype)) - ref[i]));
      }
      for (flashbox_impl impl : {FLASHBOX_NAIVE, FLASHBOX_BLOCKED}) {
        ASSERT_EQ(d.forward(impl), FLASHBOX_OK) << flashbox_last_error();
        double err = 0;
        for (size_t i = 0; i < ref.size(); ++i) {
          const double got = cpu::load_as_float(d.o_bytes().data(), c.out_dtype, int64_t(i));
          err = std::isnan(got) ? INFINITY : std::max(err, std::abs(got - ref[i]));
        }
        std::printf("fp8 %s %s: max |o - ref| %.3g, same-precision emulation %.3g, %s rounding %.3g\n",
                    flashbox_impl_name(impl), d.name().c_str(), err, emu_err, cpu::dtype_name(c.out_dtype), rounding);
        EXPECT_LE(err, 2 * emu_err + rounding);
      }
    }
}

// Descales that are powers of two make every dequantized value a bf16 number (e4m3's 4 significant
// bits times 2^n), so the fp8 call is the bf16 call on those values: the same o, bit for bit.
TEST(Fp8Forward, SameAsBf16OnTheSameValues) {
  MaskCase c = fp8_case(2, 45, 70, 4, 2, 32, 1);
  c.descale = MaskCase::Descale::head;
  MaskData d(c);
  SCOPED_TRACE(d.name());
  for (std::vector<float> *ds : {&d.descales(0), &d.descales(1), &d.descales(2)})
    for (float &s : *ds) s = std::exp2(std::round(std::log2(std::abs(s) + 1e-30f)));
  // The values the fp8 call now means, in bf16.
  const flashbox_attention_ext &e = d.ext();
  const flashbox_attention_args f = d.forward_args(FLASHBOX_BLOCKED);
  std::vector<uint16_t> q16, k16, v16;
  const int64_t group = c.heads_q / c.heads_kv;
  auto convert = [&](const void *x, int64_t rows_per, int64_t heads, int64_t g, const float *ds, const int64_t *st,
                     std::vector<uint16_t> &out) {
    const int64_t n = c.batch * rows_per * heads * c.head_dim;
    out.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) {
      const int64_t b = i / (rows_per * heads * c.head_dim), h = (i / c.head_dim) % heads;
      const float s = ds[b * st[0] + (h / g) * st[1]];
      out[size_t(i)] = cpu::float_to_bf16(core::e4m3_to_float(static_cast<const uint8_t *>(x)[i]) * s);
      ASSERT_EQ(cpu::bf16_to_float(out[size_t(i)]), core::e4m3_to_float(static_cast<const uint8_t *>(x)[i]) * s);
    }
  };
  convert(f.q, c.seqlen_q, c.heads_q, group, e.q_descale, e.q_descale_stride, q16);
  convert(f.k, c.seqlen_k, c.heads_kv, 1, e.k_descale, e.k_descale_stride, k16);
  convert(f.v, c.seqlen_k, c.heads_kv, 1, e.v_descale, e.v_descale_stride, v16);
  for (flashbox_impl impl : {FLASHBOX_NAIVE, FLASHBOX_BLOCKED}) {
    SCOPED_TRACE(flashbox_impl_name(impl));
    ASSERT_EQ(d.forward(impl), FLASHBOX_OK) << flashbox_last_error();
    const std::vector<uint8_t> o8 = d.o_bytes();
    const std::vector<float> lse8 = d.lse();
    flashbox_attention_args b = d.forward_args(impl);
    b.dtype = FLASHBOX_BFLOAT16, b.q = q16.data(), b.k = k16.data(), b.v = v16.data();
    ASSERT_EQ(flashbox_attention_forward(&b), FLASHBOX_OK) << flashbox_last_error();
    EXPECT_TRUE(o8 == d.o_bytes()) << "o differs from the bf16 call's";
    EXPECT_TRUE(lse8 == d.lse()) << "lse differs from the bf16 call's";
  }
}

// head_dim_v != head_dim and a strided (BHTD) q, with per-tensor descales that are powers of two: the
// fp8 call against the bf16 call on the same (bf16-exact) values, o and lse bit for bit.
TEST(Fp8Forward, HeadDimVAndStridedInputs) {
  const int64_t B = 2, T = 20, S = 30, H = 4, HKV = 2, D = 16, DV = 24;
  const uint64_t seed = flashbox::test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (rerun with FLASHBOX_TEST_SEED=" + std::to_string(seed) + ")");
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  const float scales[3] = {0.25f, 2.0f, 0.5f};
  auto make = [&](int64_t n, float scale, std::vector<uint8_t> &x8, std::vector<uint16_t> &x16) {
    x8.resize(size_t(n)), x16.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) {
      x8[size_t(i)] = core::float_to_e4m3(normal(rng) * 100.0f);
      x16[size_t(i)] = cpu::float_to_bf16(core::e4m3_to_float(x8[size_t(i)]) * scale);
    }
  };
  std::vector<uint8_t> q8, k8, v8;
  std::vector<uint16_t> q16, k16, v16;
  make(B * H * T * D, scales[0], q8, q16);  // BHTD
  make(B * S * HKV * D, scales[1], k8, k16);
  make(B * S * HKV * DV, scales[2], v8, v16);
  std::vector<uint16_t> o8(size_t(B * T * H * DV)), o16(o8.size());
  std::vector<float> lse8(size_t(B * H * T)), lse16(lse8.size());
  flashbox_attention_args a{};
  a.device = FLASHBOX_CPU, a.dtype = FLASHBOX_FLOAT8_E4M3, a.impl = FLASHBOX_BLOCKED;
  a.batch = B, a.seqlen_q = T, a.seqlen_k = S, a.heads_q = H, a.heads_kv = HKV, a.head_dim = D, a.causal = 1;
  const int64_t qs[3] = {H * T * D, D, T * D}, ks[3] = {S * HKV * D, HKV * D, D};
  const int64_t vs[3] = {S * HKV * DV, HKV * DV, DV}, os[3] = {T * H * DV, H * DV, DV};
  std::copy_n(qs, 3, a.q_stride), std::copy_n(ks, 3, a.k_stride), std::copy_n(vs, 3, a.v_stride);
  std::copy_n(os, 3, a.o_stride);
  for (flashbox_impl impl : {FLASHBOX_NAIVE, FLASHBOX_BLOCKED}) {
    SCOPED_TRACE(flashbox_impl_name(impl));
    a.impl = impl;
    flashbox_attention_ext e = flashbox_attention_ext_default();
    e.head_dim_v = DV;
    flashbox_attention_args x = a;
    x.q = q8.data(), x.k = k8.data(), x.v = v8.data(), x.o = o8.data(), x.lse = lse8.data();
    e.out_dtype = FLASHBOX_BFLOAT16;
    e.q_descale = &scales[0], e.k_descale = &scales[1], e.v_descale = &scales[2];
    ASSERT_EQ(flashbox_attention_forward_ext(&x, &e), FLASHBOX_OK) << flashbox_last_error();
    flashbox_attention_ext f = flashbox_attention_ext_default();
    f.head_dim_v = DV;
    x.dtype = FLASHBOX_BFLOAT16;
    x.q = q16.data(), x.k = k16.data(), x.v = v16.data(), x.o = o16.data(), x.lse = lse16.data();
    ASSERT_EQ(flashbox_attention_forward_ext(&x, &f), FLASHBOX_OK) << flashbox_last_error();
    EXPECT_TRUE(o8 == o16) << "o differs from the bf16 call's";
    EXPECT_TRUE(lse8 == lse16) << "lse differs from the bf16 call's";
  }
}

// The checks above fail on NaN: a NaN left in o (an element not written) is an error, not a pass.
TEST(Fp8Forward, NanNeverPasses) {
  MaskData d(fp8_case(1, 9, 9, 2, 1, 8, 0));
  ASSERT_EQ(d.forward(FLASHBOX_BLOCKED), FLASHBOX_OK) << flashbox_last_error();
  EXPECT_FALSE(d.o_error().nan);
  d.o_bytes()[6] = 0xff, d.o_bytes()[7] = 0x7f;  // one bf16 NaN
  EXPECT_TRUE(d.o_error().nan);
  EXPECT_FALSE(d.o_error().rel < d.tolerance());
}

}  // namespace
