// flashbox_attention_ext.learnable_sink and dsink on the GPU (device = cuda, impl auto): the forward's
// o and lse and the backward's dq, dk, dv and dsink against the fp64 CPU reference with the sinks
// (src/cpu/reference_fp64.hpp, reference_backward_fp64.hpp) on random bf16 / fp16 inputs with
// outliers (seed printed; FLASHBOX_TEST_SEED=N repeats one; tensors and reference:
// support/ext_tensors.hpp). Shapes: T = 1, 17, 64, 65, 1000, seqlen_q != seqlen_k, GQA / MQA, causal
// and not, windows and causal alignments that leave rows without a key (o = 0, lse = the sink),
// softcap, ALiBi, variable-length batches with lengths 0 and 1, head dims 64, 128 and 256; each case
// with both families pinned in turn: sm80, and auto (on a Hopper device the sm90 forward and backward
// where they take the call). Outputs are poisoned (NaN) and framed by guard bytes that must survive;
// the backward runs on the GPU forward's own o and lse, in both dQ modes.
// T = 1 is a query length here (1 x 17, 1 x 65, varlen lengths 1): where every row sees one key
// (1 x 1, window(0,0)), a sink makes dS = P (1 - P) dP, and the rounding of the 16-bit o in
// D = rowsum(dO o) enters it amplified by P / (1 - P): such shapes miss 1e-2 on dq / dk with the CPU
// levels too (measured), whatever the kernel.
// dsink = -sum over rows of P_sink (dO . o) is a sum of products of either sign, so its error is
// measured against the sum of the products' magnitudes, sum of P_sink |dO_x o_x| (its condition; a
// norm-wise relative error of a cancelling sum is not a property of the kernel): < 1e-2 of it against
// the fp64 reference (the CPU levels reach 1e-3), < 1e-4 against an fp64 sum on the host from the
// GPU's own o and lse (which checks the device reduction itself: 1e-8 on the CPU levels); and it is
// bitwise the same in both dQ modes.
// Skipped, with the reason, where there is no GPU.
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
#include "flashbox/flashbox.h"
#include "support/attention_case.hpp"
#include "support/device_buffers.hpp"
#include "support/ext_tensors.hpp"
#include "support/gpu_check.hpp"
#include "support/mods_case.hpp"
#include "support/output_error.hpp"

namespace flashbox::test {
namespace {

// The shape and mods (support/mods_case.hpp), then:
struct SinkCase : ModsCase {
  std::vector<int> lens_q = {}, lens_k = {};  // varlen when set (batch, seqlen_* then follow from them)
  flashbox_dtype dtype = FLASHBOX_BFLOAT16;
};

const char *family_name(flashbox_kernel_family f) { return f == FLASHBOX_FAMILY_SM80 ? "sm80" : "auto"; }

void run_case(const SinkCase &c) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(c.name + " seed " + std::to_string(seed) + " (FLASHBOX_TEST_SEED=" + std::to_string(seed) + ")");
  std::mt19937_64 rng(seed);
  const ExtTensors t(c, c.lens_q, c.lens_k, ExtDraw{c.dtype, true, true}, rng);
  const ExtReference ref = ext_reference(t);
  const HostDsink ref_dsink = host_dsink(
      t, [&](int64_t i) { return ref.o[size_t(i)]; }, [&](int64_t i) { return ref.lse[size_t(i)]; });
  const int64_t hq = c.heads_q;

  DeviceInput q(t.q.data(), t.q.size() * 2), k(t.k.data(), t.k.size() * 2), v(t.v.data(), t.v.size() * 2);
  DeviceInput dout(t.dout.data(), t.dout.size() * 2);
  DeviceInput cu_q(t.cu_q.data(), t.cu_q.size() * 4), cu_k(t.cu_k.data(), t.cu_k.size() * 4);
  DeviceInput slopes(t.slopes.data(), t.slopes.size() * 4), sinks(t.sinks.data(), t.sinks.size() * 4);
  ASSERT_TRUE(q.ptr && k.ptr && v.ptr && dout.ptr && cu_q.ptr && cu_k.ptr && slopes.ptr && sinks.ptr)
      << "device allocation";
  flashbox_attention_ext e = call_ext(c, slopes.ptr);
  e.learnable_sink = static_cast<const float *>(sinks.ptr);
  if (t.varlen) {
    e.cu_seqlens_q = static_cast<const int32_t *>(cu_q.ptr), e.cu_seqlens_k = static_cast<const int32_t *>(cu_k.ptr);
    e.max_seqlen_q = t.max_q, e.max_seqlen_k = t.max_k;
  }

  for (const flashbox_kernel_family family : {FLASHBOX_FAMILY_SM80, FLASHBOX_FAMILY_AUTO}) {
    SCOPED_TRACE(std::string("family ") + family_name(family));
    detail::TuningOverrides pin = detail::tuning_overrides();
    pin.forward_family = pin.backward_family = family;
    const detail::ScopedTuning scoped(pin);

    GuardedOutput o(t.q.size() * 2), lse(size_t(t.total_q * hq) * 4);
    ASSERT_TRUE(o.raw && lse.raw) << "device allocation";
    flashbox_attention_args a = t.args();
    a.device = FLASHBOX_CUDA;
    a.q = q.ptr, a.k = k.ptr, a.v = v.ptr, a.o = o.ptr(), a.lse = static_cast<float *>(lse.ptr());
    flashbox_attention_ext fe = e;
    fe.dsink = nullptr;
    ASSERT_EQ(flashbox_attention_forward_ext(&a, &fe), 0) << flashbox_last_error();
    const std::string fwd_kernel = flashbox_last_kernel();
    if (family == FLASHBOX_FAMILY_SM80) EXPECT_EQ(fwd_kernel.rfind("cuda_flash_sm80_", 0), 0u) << fwd_kernel;
    if (fwd_kernel.rfind("cuda_flash_sm90_", 0) == 0)
      EXPECT_NE(fwd_kernel.find("_sink"), std::string::npos) << fwd_kernel;
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<uint16_t> o_host(t.q.size());
    std::vector<float> lse_host(size_t(t.total_q * hq));
    ASSERT_TRUE(o.back(o_host.data())) << "a guard byte around o changed (write out of bounds)";
    ASSERT_TRUE(lse.back(lse_host.data())) << "a guard byte around lse changed (write out of bounds)";
    const RelError eo = rel_error(to_double(o_host, c.dtype), ref.o);
    EXPECT_FALSE(eo.nan) << "o has NaN (" << fwd_kernel << ")";
    EXPECT_LT(eo.rel_or_inf(), 1e-2) << "o (" << fwd_kernel << ")";
    // With a sink every row's lse is finite (the reference has no -inf either).
    const LseError el = lse_error(lse_host.data(), ref.lse, LseRule::minus_inf_where_reference_is);
    EXPECT_EQ(el.bad, 0) << "lse entries that are not finite (" << fwd_kernel << ")";
    EXPECT_LT(el.max_abs, 2e-2) << "lse (" << fwd_kernel << ")";
    // Rows without a key: o exactly 0, lse the sink (up to its trip through base 2).
    int64_t keyless = 0, keyless_bad = 0;
    for (int64_t b = 0; b < t.c.batch; ++b)
      for (int64_t i = 0; i < t.len_q(b); ++i) {
        if (!t.keyless(b, i)) continue;
        for (int64_t h = 0; h < hq; ++h) {
          ++keyless;
          const float sink = t.sinks[size_t(h)], got = lse_host[size_t(t.lse_index(b, i, h))];
          bool ok = std::fabs(got - sink) <= 1e-5f * std::max(1.0f, std::fabs(sink));
          for (int64_t x = 0; x < c.head_dim; ++x)
            ok = ok && cpu::load_as_float(o_host.data(), c.dtype, t.row_index(b, i, h) + x) == 0.0f;
          keyless_bad += !ok;
        }
      }
    EXPECT_EQ(keyless_bad, 0) << "of " << keyless << " keyless rows x heads: o not 0 or lse not the sink ("
                              << fwd_kernel << ")";
    // The reduction itself: dsink from the GPU's own o and lse, in fp64 on the host.
    const HostDsink own = host_dsink(
        t, [&](int64_t i) { return double(cpu::load_as_float(o_host.data(), c.dtype, i)); },
        [&](int64_t i) { return double(lse_host[size_t(i)]); });

    std::vector<float> dsink_modes[2];
    std::string bwd_family[2];  // "sm80" or "sm90": the two dQ modes may run different families
    for (int det = 0; det <= 1; ++det) {
      GuardedOutput dq(t.q.size() * 2), dk(t.k.size() * 2), dv(t.v.size() * 2), dsink(size_t(hq) * 4);
      ASSERT_TRUE(dq.raw && dk.raw && dv.raw && dsink.raw) << "device allocation";
      flashbox_attention_grad_args g = grad_args_like(a, dout.ptr, dq.ptr(), dk.ptr(), dv.ptr(), det);
      flashbox_attention_ext be = e;
      be.dsink = static_cast<float *>(dsink.ptr());
      ASSERT_EQ(flashbox_attention_backward_ext(&g, &be), 0) << flashbox_last_error();
      const std::string bwd_kernel = flashbox_last_kernel() + std::string(", deterministic ") + std::to_string(det);
      if (family == FLASHBOX_FAMILY_SM80) EXPECT_EQ(bwd_kernel.rfind("cuda_flash_bwd_sm80_", 0), 0u) << bwd_kernel;
      bwd_family[det] = bwd_kernel.find("sm90") != std::string::npos ? "sm90" : "sm80";
      CUDA_OK(cudaDeviceSynchronize());
      std::vector<uint16_t> h_dq(t.q.size()), h_dk(t.k.size()), h_dv(t.v.size());
      std::vector<float> &h_dsink = dsink_modes[det];
      h_dsink.resize(size_t(hq));
      ASSERT_TRUE(dq.back(h_dq.data())) << "a guard byte around dq changed";
      ASSERT_TRUE(dk.back(h_dk.data())) << "a guard byte around dk changed";
      ASSERT_TRUE(dv.back(h_dv.data())) << "a guard byte around dv changed";
      ASSERT_TRUE(dsink.back(h_dsink.data())) << "a guard byte around dsink changed";
      const std::pair<const char *, std::pair<const std::vector<uint16_t> *, const std::vector<double> *>> grads[] = {
          {"dq", {&h_dq, &ref.dq}}, {"dk", {&h_dk, &ref.dk}}, {"dv", {&h_dv, &ref.dv}}};
      for (const auto &[name, pr] : grads) {
        const RelError eg = rel_error(to_double(*pr.first, c.dtype), *pr.second);
        EXPECT_FALSE(eg.nan) << name << " has NaN (" << bwd_kernel << ")";
        EXPECT_LT(eg.rel_or_inf(), 1e-2) << name << " (" << bwd_kernel << ")";
      }
      for (int64_t h = 0; h < hq; ++h) {
        const double got = h_dsink[size_t(h)];
        ASSERT_TRUE(std::isfinite(got)) << "dsink[" << h << "] = " << got << " (" << bwd_kernel << ")";
        EXPECT_LT(std::fabs(got - ref.dsink[size_t(h)]), 1e-2 * std::max(ref_dsink.products[size_t(h)], 1e-30))
            << "dsink[" << h << "] = " << got << ", reference " << ref.dsink[size_t(h)] << ", terms' magnitude "
            << ref_dsink.magnitude[size_t(h)] << ", products' " << ref_dsink.products[size_t(h)] << " (" << bwd_kernel
            << ")";
        EXPECT_LE(std::fabs(got - own.dsink[size_t(h)]), 1e-4 * std::max(own.products[size_t(h)], 1e-30))
            << "dsink[" << h << "] = " << got << ", host sum of the GPU's o and lse " << own.dsink[size_t(h)] << " ("
            << bwd_kernel << ")";
      }
    }
    // One family computes D = rowsum(dO * O) in one order whatever the dQ mode, so its dsink is
    // bitwise the same; two families (d256 runs sm90 when not deterministic and sm80 when it is)
    // sum D in different orders, and each mode's dsink was checked against its own o and lse above.
    if (bwd_family[0] == bwd_family[1])
      EXPECT_EQ(std::memcmp(dsink_modes[0].data(), dsink_modes[1].data(), size_t(hq) * 4), 0)
          << "dsink differs between the dQ modes of the " << bwd_family[0] << " backward";
    std::printf("  %-46s %s ok: o %.2e  kernel %s  seed %llu\n", c.name.c_str(), family_name(family), eo.rel,
                fwd_kernel.c_str(), static_cast<unsigned long long>(seed));
  }
}

SinkCase with_dtype(SinkCase c, flashbox_dtype dtype) {
  c.dtype = dtype;
  return c;
}

// Fixed length, T up to 65; the causal 65x17 rows 0..47 and the window(8,0) 64x17 rows 0..46 see no key.
const std::vector<SinkCase> kSmall = {
    {"1x17 GQA d64", 4, 1, 17, 8, 2, 64, 0},
    with_dtype({"causal T17 GQA d128 fp16", 2, 17, 17, 4, 2, 128, 1}, FLASHBOX_FLOAT16),
    with_dtype({"causal 1x65 GQA d128 fp16", 1, 1, 65, 4, 2, 128, 1}, FLASHBOX_FLOAT16),
    {"causal 65x17 GQA d64 (keyless rows)", 2, 65, 17, 4, 2, 64, 1},
    with_dtype({"window(8,0) 64x17 d128 (keyless rows) fp16", 1, 64, 17, 2, 2, 128, 0, 8, 0}, FLASHBOX_FLOAT16),
    {"softcap 5 alibi 64x65 MQA d128", 1, 64, 65, 2, 1, 128, 0, -1, -1, 5.0f, Alibi::head},
    {"causal window(16,-1) 65x64 d64", 2, 65, 64, 2, 2, 64, 1, 16},
};

// T = 1000.
const std::vector<SinkCase> kLarge = {
    {"causal window(100,0) T1000 d64", 1, 1000, 1000, 2, 2, 64, 1, 100},
    with_dtype({"softcap 10 300x1000 GQA d128 fp16", 1, 300, 1000, 4, 2, 128, 0, -1, -1, 10.0f}, FLASHBOX_FLOAT16),
};

// Head dim 256 (the d256 kernels of both families).
const std::vector<SinkCase> kWide = {
    {"plain 65x1000 MQA d256", 1, 65, 1000, 2, 1, 256, 0},
    with_dtype({"causal 17x65 d256 fp16", 2, 17, 65, 2, 2, 256, 1}, FLASHBOX_FLOAT16),
    {"causal 65x17 d256 (keyless rows)", 1, 65, 17, 2, 1, 256, 1},
};

// Variable-length batches: lengths 0 and 1, a sequence with queries and no key (every row keyless),
// one with keys and no query, seqlen_q != seqlen_k.
const std::vector<SinkCase> kVarlen = {
    {"varlen causal GQA d64", 0, 0, 0, 4, 2, 64, 1, -1, -1, 0.0f, Alibi::none, {0, 1, 17, 64, 65}, {5, 1, 17, 0, 130}},
    with_dtype({"varlen window(20,10) softcap alibi d128 fp16",
                0,
                0,
                0,
                2,
                1,
                128,
                0,
                20,
                10,
                3.0f,
                Alibi::head,
                {1, 0, 65, 1000},
                {1, 3, 64, 1000}},
               FLASHBOX_FLOAT16),
    {"varlen causal d256", 0, 0, 0, 2, 2, 256, 1, -1, -1, 0.0f, Alibi::none, {17, 0, 33, 1}, {40, 7, 0, 1}},
};

TEST(SinkCuda, SmallCases) {
  SKIP_WITHOUT_GPU();
  for (const SinkCase &c : kSmall) run_case(c);
}

TEST(SinkCuda, LargeCases) {
  SKIP_WITHOUT_GPU();
  for (const SinkCase &c : kLarge) run_case(c);
}

TEST(SinkCuda, HeadDim256) {
  SKIP_WITHOUT_GPU();
  for (const SinkCase &c : kWide) run_case(c);
}

TEST(SinkCuda, VariableLength) {
  SKIP_WITHOUT_GPU();
  for (const SinkCase &c : kVarlen) run_case(c);
}

// impl = naive on cuda has no sink: refused by name before anything is written.
TEST(SinkCuda, NaiveRefusesSinks) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(1);
  const ExtTensors t({"naive", 1, 17, 17, 2, 2, 64, 0}, {}, {}, ExtDraw{FLASHBOX_BFLOAT16, true}, rng);
  DeviceInput q(t.q.data(), t.q.size() * 2), sinks(t.sinks.data(), t.sinks.size() * 4);
  GuardedOutput o(t.q.size() * 2);
  ASSERT_TRUE(q.ptr && sinks.ptr && o.raw) << "device allocation";
  flashbox_attention_args a = t.args();
  a.device = FLASHBOX_CUDA, a.impl = FLASHBOX_NAIVE;
  a.q = a.k = a.v = q.ptr, a.o = o.ptr();
  flashbox_attention_ext e = flashbox_attention_ext_default();
  e.learnable_sink = static_cast<const float *>(sinks.ptr);
  EXPECT_EQ(flashbox_attention_forward_ext(&a, &e), FLASHBOX_ERR_UNSUPPORTED_IMPL);
  EXPECT_NE(std::string(flashbox_last_error()).find("learnable_sink"), std::string::npos) << flashbox_last_error();
  std::vector<uint8_t> host;
  ASSERT_TRUE(o.back(host));
  EXPECT_TRUE(std::all_of(host.begin(), host.end(), [](uint8_t x) { return x == 0xff; })) << "o was written";
}

// The sinks and dsink must be device memory on cuda (their values are not read on the host).
TEST(SinkCuda, HostSinksAreRefused) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(2);
  const ExtTensors t({"host sinks", 1, 17, 17, 2, 2, 64, 0}, {}, {}, ExtDraw{FLASHBOX_BFLOAT16, true}, rng);
  DeviceInput q(t.q.data(), t.q.size() * 2);
  GuardedOutput o(t.q.size() * 2);
  ASSERT_TRUE(q.ptr && o.raw) << "device allocation";
  flashbox_attention_args a = t.args();
  a.device = FLASHBOX_CUDA;
  a.q = a.k = a.v = q.ptr, a.o = o.ptr();
  flashbox_attention_ext e = flashbox_attention_ext_default();
  e.learnable_sink = t.sinks.data();
  EXPECT_EQ(flashbox_attention_forward_ext(&a, &e), FLASHBOX_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashbox_last_error()).find("learnable_sink"), std::string::npos) << flashbox_last_error();
}

}  // namespace
}  // namespace flashbox::test
