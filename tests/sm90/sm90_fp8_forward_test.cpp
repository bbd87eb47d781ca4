// The Hopper fp8 forward (src/cuda/forward/sm90/flash_fwd_sm90_fp8*) through flashbox_attention_forward_ext
// with dtype e4m3 on device = cuda: q, k, v quantized from normals (outliers in q, k and v where asked),
// descales per (batch, kv head) or per tensor, against the fp64 reference on the dequantized inputs.
// FlashAttention-3's rule: max |o - ref| <= 2 max |emulation - ref| + the output's rounding, with the
// emulation its same-precision reference (support/fp8_emulation.hpp: P rounded to e4m3); LSE within
// 2e-3 of the reference's (relative to max(1, |lse|)); o and lse poisoned with NaN first, so an unwritten element fails; no NaN or
// Inf from finite inputs; the fp8 kernel named by flashbox_last_kernel. Shapes: T = 1, 17, 63, 64, 65,
// 1000, 4097, seqlen_q != seqlen_k, GQA and MQA, causal and not, head dims 64, 128, 256 (and 80, 192 on
// the 128 and 256 kernels' zero fill). Bad descales are refused before anything is written. The
// schedules: the persistent grid with CTAs capped so that each walks many tiles, the grid of one CTA
// per tile, and more tiles than one wave of SMs. Skips without a compute capability 9.0 GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "api/tuning.hpp"
#include "core/dtype.hpp"
#include "core/float8.hpp"
#include "core/masks.hpp"
#include "flashbox/flashbox.h"
#include "sm90/hopper_device.hpp"
#include "support/fp8_emulation.hpp"

namespace flashbox::test::sm90_fp8_forward {
namespace {

#define SKIP_WITHOUT_HOPPER() \
  do { \
    std::string why_; \
    if (!have_hopper(why_)) GTEST_SKIP() << "sm90 fp8 test not run: " << why_; \
  } while (0)

struct Fp8Shape2 {
  int64_t batch, sq, sk, hq, hkv, d;
  int causal;
};

// One device allocation, freed on scope exit.
struct Dev {
  void *p = nullptr;
  explicit Dev(size_t bytes) {
    if (cudaMalloc(&p, std::max<size_t>(bytes, 4)) != cudaSuccess) p = nullptr;
  }
  ~Dev() {
    if (p) cudaFree(p);
  }
  Dev(const Dev &) = delete;
  Dev &operator=(const Dev &) = delete;
};

struct Fp8Inputs {
  Fp8Shape2 s;
  bool per_head;  // false: one descale per tensor, passed with strides {0, 0} (broadcast)
  std::vector<uint8_t> q, k, v;           // e4m3, dense [batch, seq, heads, d]
  std::vector<float> qd, kd, vd;          // [batch, heads_kv] descales
  std::vector<float> qf, kf, vf;          // dequantized
  std::vector<double> ref, ref_lse;       // fp64 attention of the dequantized inputs
};

// Inputs from normals times `spread`, outliers (+-300..448 in q, k and v at a few places) when asked;
// descales in [0.02, 0.2] for q and k, [0.5, 1.5] for v, per (batch, kv head), or one per tensor.
Fp8Inputs make_inputs(const Fp8Shape2 &s, bool outliers, bool per_head, uint64_t seed) {
  Fp8Inputs in;
  in.s = s, in.per_head = per_head;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_real_distribution<float> uni(0.f, 1.f);
  const auto fill = [&](std::vector<uint8_t> &x, int64_t n) {
    x.resize(size_t(n));
    for (auto &b : x) b = core::float_to_e4m3(normal(rng) * 8.f);
    if (outliers)
      for (int i = 0; i < 8; ++i) x[size_t(rng() % uint64_t(n))] = core::float_to_e4m3((i % 2 ? -1.f : 1.f) * (300.f + 148.f * uni(rng)));
  };
  fill(in.q, s.batch * s.sq * s.hq * s.d);
  fill(in.k, s.batch * s.sk * s.hkv * s.d);
  fill(in.v, s.batch * s.sk * s.hkv * s.d);
  const size_t nd = size_t(s.batch * s.hkv);
  in.qd.resize(nd), in.kd.resize(nd), in.vd.resize(nd);
  for (size_t i = 0; i < nd; ++i) {
    const size_t j = per_head ? i : 0;
    if (per_head || i == 0) {
      in.qd[i] = 0.02f + 0.18f * uni(rng), in.kd[i] = 0.02f + 0.18f * uni(rng), in.vd[i] = 0.5f + uni(rng);
    } else {
      in.qd[i] = in.qd[j], in.kd[i] = in.kd[j], in.vd[i] = in.vd[j];
    }
  }
  const auto deq = [&](const std::vector<uint8_t> &x, int64_t seq, int64_t heads, int64_t group,
                       const std::vector<float> &ds, std::vector<float> &out) {
    out.resize(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const int64_t b = int64_t(i) / (seq * heads * s.d), h = (int64_t(i) / s.d) % heads;
      out[i] = core::e4m3_to_float(x[i]) * ds[size_t(b * s.hkv + h / group)];
    }
  };
  deq(in.q, s.sq, s.hq, s.hq / s.hkv, in.qd, in.qf);
  deq(in.k, s.sk, s.hkv, 1, in.kd, in.kf);
  deq(in.v, s.sk, s.hkv, 1, in.vd, in.vf);
  // fp64 reference, bottom-right aligned causal mask.
  const double scale = 1.0 / std::sqrt(double(s.d));
  in.ref.assign(size_t(s.batch * s.sq * s.hq * s.d), 0.0);
  in.ref_lse.assign(size_t(s.batch * s.hq * s.sq), -INFINITY);
  std::vector<double> p(size_t(s.sk));
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.hq; ++h) {
      const int64_t g = h / (s.hq / s.hkv);
      for (int64_t i = 0; i < s.sq; ++i) {
        const int64_t end = s.causal ? std::min(s.sk, i + s.sk - s.sq + 1) : s.sk;
        if (end <= 0) continue;
        const float *qi = &in.qf[size_t(((b * s.sq + i) * s.hq + h) * s.d)];
        double mx = -INFINITY;
        for (int64_t j = 0; j < end; ++j) {
          const float *kj = &in.kf[size_t(((b * s.sk + j) * s.hkv + g) * s.d)];
          double acc = 0;
          for (int64_t c = 0; c < s.d; ++c) acc += double(qi[c]) * double(kj[c]);
          p[size_t(j)] = acc * scale;
          mx = std::max(mx, p[size_t(j)]);
        }
        double l = 0;
        for (int64_t j = 0; j < end; ++j) l += (p[size_t(j)] = std::exp(p[size_t(j)] - mx));
        double *o = &in.ref[size_t(((b * s.sq + i) * s.hq + h) * s.d)];
        for (int64_t j = 0; j < end; ++j) {
          const float *vj = &in.vf[size_t(((b * s.sk + j) * s.hkv + g) * s.d)];
          for (int64_t c = 0; c < s.d; ++c) o[c] += p[size_t(j)] / l * double(vj[c]);
        }
        in.ref_lse[size_t((b * s.hq + h) * s.sq + i)] = mx + std::log(l);
      }
    }
  return in;
}

struct Fp8Run {
  int rc = 0;
  std::string error, kernel;
  std::vector<uint16_t> o;
  std::vector<float> lse;
};

// The call on the device: o (bf16 or fp16) and lse poisoned with NaN bytes first.
// (void, results in r: CUDA_OK asserts.)
void run_cuda(const Fp8Inputs &in, flashbox_dtype out_dtype, Fp8Run &r, const float *qd_dev_override = nullptr,
              float softcap = 0.f) {
  const Fp8Shape2 &s = in.s;
  const size_t no = size_t(s.batch * s.sq * s.hq * s.d), nl = size_t(s.batch * s.hq * s.sq);
  Dev q(in.q.size()), k(in.k.size()), v(in.v.size()), o(no * 2), lse(nl * 4);
  Dev qd(in.qd.size() * 4), kd(in.kd.size() * 4), vd(in.vd.size() * 4);
  CUDA_OK(cudaMemcpy(q.p, in.q.data(), in.q.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(k.p, in.k.data(), in.k.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(v.p, in.v.data(), in.v.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(qd.p, in.qd.data(), in.qd.size() * 4, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(kd.p, in.kd.data(), in.kd.size() * 4, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(vd.p, in.vd.data(), in.vd.size() * 4, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(o.p, 0xff, no * 2));  // NaN in bf16 and fp16
  CUDA_OK(cudaMemset(lse.p, 0xff, nl * 4));
  flashbox_attention_args a{};
  a.device = FLASHBOX_CUDA, a.dtype = FLASHBOX_FLOAT8_E4M3, a.impl = FLASHBOX_AUTO;
  a.batch = s.batch, a.seqlen_q = s.sq, a.seqlen_k = s.sk, a.heads_q = s.hq, a.heads_kv = s.hkv, a.head_dim = s.d;
  a.causal = s.causal;
  a.q = q.p, a.k = k.p, a.v = v.p, a.o = o.p, a.lse = static_cast<float *>(lse.p);
  const int64_t qs[3] = {s.sq * s.hq * s.d, s.hq * s.d, s.d}, ks[3] = {s.sk * s.hkv * s.d, s.hkv * s.d, s.d};
  std::copy_n(qs, 3, a.q_stride), std::copy_n(ks, 3, a.k_stride), std::copy_n(ks, 3, a.v_stride);
  std::copy_n(qs, 3, a.o_stride);
  flashbox_attention_ext e = flashbox_attention_ext_default();
  e.out_dtype = out_dtype;
  e.softcap = softcap;
  e.q_descale = qd_dev_override ? qd_dev_override : static_cast<const float *>(qd.p);
  e.k_descale = static_cast<const float *>(kd.p), e.v_descale = static_cast<const float *>(vd.p);
  for (int64_t *st : {e.q_descale_stride, e.k_descale_stride, e.v_descale_stride})
    st[0] = in.per_head ? s.hkv : 0, st[1] = in.per_head ? 1 : 0;
  r.rc = flashbox_attention_forward_ext(&a, &e);
  r.error = flashbox_last_error();
  r.kernel = flashbox_last_kernel();
  CUDA_OK(cudaDeviceSynchronize());
  r.o.resize(no), r.lse.resize(nl);
  CUDA_OK(cudaMemcpy(r.o.data(), o.p, no * 2, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(r.lse.data(), lse.p, nl * 4, cudaMemcpyDeviceToHost));
}

// Runs one shape and checks it against the rule in the file's opening comment.
// kernel_has: a part the kernel's name must contain (the schedule: "_persistent"), or null.
void check_shape(const Fp8Shape2 &s, bool outliers, bool per_head = true, flashbox_dtype out = FLASHBOX_BFLOAT16,
                 const char *kernel_has = nullptr) {
  const uint64_t seed = 0x5eed0000u + uint64_t(s.sq * 131 + s.sk * 7 + s.d + s.causal);
  char name[160];
  std::snprintf(name, sizeof name, "b%lld sq%lld sk%lld h%lld/%lld d%lld causal%d outliers%d per_head%d %s",
                (long long)s.batch, (long long)s.sq, (long long)s.sk, (long long)s.hq, (long long)s.hkv,
                (long long)s.d, s.causal, int(outliers), int(per_head), cpu::dtype_name(out));
  SCOPED_TRACE(name);
  const Fp8Inputs in = make_inputs(s, outliers, per_head, seed);
  Fp8Run r;
  ASSERT_NO_FATAL_FAILURE(run_cuda(in, out, r));
  ASSERT_EQ(r.rc, FLASHBOX_OK) << r.error;
  EXPECT_NE(r.kernel.find("sm90_fp8"), std::string::npos) << r.kernel;
  if (kernel_has != nullptr) {
    EXPECT_NE(r.kernel.find(kernel_has), std::string::npos) << r.kernel;
  }
  // The emulation takes the dequantized inputs and one scale (descales are in the values already).
  core::ScoreMods m = core::causal_mods(s.causal != 0);
  const Fp8Shape shape{s.batch, s.sq, s.sk, s.hq, s.hkv, s.d, float(1.0 / std::sqrt(double(s.d)))};
  const std::vector<double> emu = fp8_same_precision_attention(in.qf, in.kf, in.vf, shape, m, out);
  double emu_err = 0, rounding = 0, err = 0, lse_err = 0;
  int64_t nonfinite = 0;
  for (size_t i = 0; i < in.ref.size(); ++i) {
    emu_err = std::max(emu_err, std::abs(emu[i] - in.ref[i]));
    rounding = std::max(rounding, std::abs(double(cpu::round_to_dtype(float(in.ref[i]), out)) - in.ref[i]));
    const double got = cpu::load_as_float(r.o.data(), out, int64_t(i));
    if (!std::isfinite(got)) {
      ++nonfinite;
      continue;
    }
    err = std::max(err, std::abs(got - in.ref[i]));
  }
  for (size_t i = 0; i < in.ref_lse.size(); ++i) {
    const double want = in.ref_lse[i], got = r.lse[i];
    if (std::isinf(want)) {
      if (!(std::isinf(got) && got < 0)) ++nonfinite;
    } else if (!std::isfinite(got)) {
      ++nonfinite;
    } else {
      lse_err = std::max(lse_err, std::abs(got - want) / std::max(1.0, std::abs(want)));
    }
  }
  std::printf("fp8 cuda %s: max |o - ref| %.3g, emulation %.3g, rounding %.3g, lse %.3g\n", name, err, emu_err,
              rounding, lse_err);
  EXPECT_EQ(nonfinite, 0) << "NaN/Inf (or an unwritten, poisoned element) in o or lse";
  EXPECT_LE(err, 2 * emu_err + rounding);
  EXPECT_LE(lse_err, 2e-3);  // relative to max(1, |lse|): scores from fp32 sums of exact e4m3 products
}

TEST(Sm90Fp8Forward, SequenceLengths) {
  SKIP_WITHOUT_HOPPER();
  for (int64_t t : {1, 17, 63, 64, 65, 1000})
    for (int causal : {0, 1}) check_shape({2, t, t, 4, 2, 128, causal}, false);
}

TEST(Sm90Fp8Forward, LongSequence) {
  SKIP_WITHOUT_HOPPER();
  for (int causal : {0, 1}) check_shape({1, 4097, 4097, 1, 1, 128, causal}, false);
}

TEST(Sm90Fp8Forward, HeadDims) {
  SKIP_WITHOUT_HOPPER();
  for (int64_t d : {64, 80, 192, 256})
    for (int causal : {0, 1}) check_shape({2, 200, 200, 2, 1, d, causal}, false);
}

TEST(Sm90Fp8Forward, SeqlenQDiffersFromSeqlenK) {
  SKIP_WITHOUT_HOPPER();
  for (int causal : {0, 1}) {
    check_shape({2, 65, 300, 2, 2, 128, causal}, false);
    check_shape({2, 300, 65, 2, 2, 128, causal}, false);  // causal: the first rows see no key
    check_shape({1, 130, 257, 4, 2, 256, causal}, false);
  }
}

TEST(Sm90Fp8Forward, GqaAndMqa) {
  SKIP_WITHOUT_HOPPER();
  for (int64_t hkv : {2, 1})
    for (int causal : {0, 1}) check_shape({2, 150, 170, 8, hkv, 128, causal}, false);
}

TEST(Sm90Fp8Forward, OutliersDescalesAndOutputDtypes) {
  SKIP_WITHOUT_HOPPER();
  for (bool per_head : {false, true})
    for (flashbox_dtype out : {FLASHBOX_BFLOAT16, FLASHBOX_FLOAT16})
      for (int64_t d : {128, 256}) check_shape({2, 257, 257, 4, 2, d, 1}, true, per_head, out);
}

// The tuning overrides of one schedule (core/tuning.hpp): persistent with max_ctas CTAs (0: one per
// SM), or the grid of one CTA per tile.
detail::TuningOverrides schedule(detail::Sm90Schedule which, int max_ctas = 0) {
  detail::TuningOverrides o;
  o.sm90_schedule = which, o.sm90_max_ctas = max_ctas;
  return o;
}

// Persistent CTAs capped at 3 and 5, so that each walks many tiles: the K and V^T rings, the Q buffer
// and the ping-pong turns carry over between tiles, in the snake order over rounds, including tiles
// that see no key (causal, seqlen_q > seqlen_k) and tiles of unequal work (causal, seqlen_q <
// seqlen_k), GQA and per-head descales (each tile reads its own (batch, kv head)'s).
TEST(Sm90Fp8Forward, PersistentManyTilesPerCta) {
  SKIP_WITHOUT_HOPPER();
  for (int ctas : {3, 5}) {
    const detail::ScopedTuning tuning(schedule(detail::Sm90Schedule::persistent, ctas));
    for (int causal : {0, 1}) {
      std::fprintf(stderr, "fp8 persistent case: ctas %d causal %d\n", ctas, causal);  // a hang shows where
      check_shape({2, 640, 640, 3, 1, 128, causal}, false, true, FLASHBOX_BFLOAT16, "_persistent");
      check_shape({2, 700, 190, 4, 2, 128, causal}, false, true, FLASHBOX_BFLOAT16, "_persistent");
      check_shape({3, 300, 1000, 4, 2, 256, causal}, false, true, FLASHBOX_BFLOAT16, "_persistent");
      check_shape({1, 1000, 1000, 8, 1, 64, causal}, false, true, FLASHBOX_FLOAT16, "_persistent");
    }
  }
}

// More tiles than one wave of SMs (B * H * query blocks = 2 * 16 * 5 = 160 and 2 * 24 * 3 = 144 >
// 132), on the default schedule (persistent: some CTAs walk two tiles) and on the grid of one CTA per
// tile; the causal ones with seqlen_q != seqlen_k both ways; GQA 16 / 4 and 24 / 4.
TEST(Sm90Fp8Forward, BeyondOneWave) {
  SKIP_WITHOUT_HOPPER();
  for (int causal : {0, 1}) {
    check_shape({2, 520, 520, 16, 4, 128, causal}, false, true, FLASHBOX_BFLOAT16, "_persistent");
    check_shape({2, 520, 300, 16, 4, 256, causal}, false, true, FLASHBOX_BFLOAT16, "_persistent");
    check_shape({2, 300, 700, 24, 4, 128, causal}, false, true, FLASHBOX_BFLOAT16, "_persistent");
  }
  const detail::ScopedTuning tuning(schedule(detail::Sm90Schedule::grid));
  for (int causal : {0, 1}) {
    check_shape({2, 520, 520, 16, 4, 128, causal}, false);
    check_shape({2, 520, 300, 16, 4, 256, causal}, false);
  }
}

// A descale that is NaN, Inf or negative is refused with a message naming it, and o keeps its poison.
TEST(Sm90Fp8Forward, BadDescalesRefusedNothingWritten) {
  SKIP_WITHOUT_HOPPER();
  const Fp8Inputs in = make_inputs({1, 64, 64, 2, 1, 128, 0}, false, true, 7);
  for (float bad : {NAN, INFINITY, -1.0f}) {
    Dev qd(4);
    CUDA_OK(cudaMemcpy(qd.p, &bad, 4, cudaMemcpyHostToDevice));
    Fp8Run r;
    ASSERT_NO_FATAL_FAILURE(run_cuda(in, FLASHBOX_BFLOAT16, r, static_cast<const float *>(qd.p)));
    EXPECT_EQ(r.rc, FLASHBOX_ERR_INVALID_ARGUMENT) << r.error;
    EXPECT_NE(r.error.find("q_descale[0, 0]"), std::string::npos) << r.error;
    for (uint16_t x : r.o) ASSERT_EQ(x, 0xffff) << "o was written by a refused call";
  }
}

// What the sm90 fp8 forward declines is refused on cuda with its reason (the cpu levels take it), and a
// head_dim whose rows are not 16-byte multiples (72 e4m3 bytes) is refused by the argument checks.
TEST(Sm90Fp8Forward, DeclinedFieldsRefusedWithReason) {
  SKIP_WITHOUT_HOPPER();
  {
    const Fp8Inputs in = make_inputs({1, 64, 64, 2, 1, 64, 0}, false, true, 9);
    Fp8Run r;
    ASSERT_NO_FATAL_FAILURE(run_cuda(in, FLASHBOX_BFLOAT16, r, nullptr, 30.f));
    EXPECT_EQ(r.rc, FLASHBOX_ERR_UNSUPPORTED_IMPL) << r.error;
    EXPECT_NE(r.error.find("no softcap or ALiBi"), std::string::npos) << r.error;
    for (uint16_t x : r.o) ASSERT_EQ(x, 0xffff) << "o was written by a refused call";
  }
  const Fp8Inputs in = make_inputs({1, 64, 64, 2, 1, 72, 0}, false, true, 9);
  Fp8Run r;
  ASSERT_NO_FATAL_FAILURE(run_cuda(in, FLASHBOX_BFLOAT16, r));
  EXPECT_EQ(r.rc, FLASHBOX_ERR_MISALIGNED) << r.error;
  EXPECT_NE(r.error.find("is not a multiple of 16 elements"), std::string::npos) << r.error;
  for (uint16_t x : r.o) ASSERT_EQ(x, 0xffff) << "o was written by a refused call";
}

}  // namespace
}  // namespace flashbox::test::sm90_fp8_forward

#undef SKIP_WITHOUT_HOPPER
