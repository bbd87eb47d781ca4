// flashbox_attention_ext.head_dim_v on the GPU (device = cuda): V and O with a head dim of their own,
// which src/api/head_dim_v_split.cpp runs as the existing kernels on column slices of V and O (a
// pair with a Hopper kernel of its own, 192 / 128, runs there under auto instead, both passes). The
// forward's o and lse and the backward's dq, dk, dv (and dsink with sinks) against the fp64 CPU
// reference with head_dim_v (src/cpu/reference_fp64.hpp, reference_backward_fp64.hpp; tensors and
// reference: support/ext_tensors.hpp) on random bf16 / fp16 inputs (seed printed;
// FLASHBOX_TEST_SEED=N repeats one). (head_dim, head_dim_v) = (192, 128) and (128, 64) (V narrower:
// one call, V zero-padded), (64, 512) (two calls of 256 columns, Q and K zero-padded), (128, 256) and
// (64, 256) (one call at 256); query lengths 1, 17, 65 and 1000, seqlen_q != seqlen_k both ways
// (causal 65 x 17 leaves rows without a key), GQA and MQA, causal and not, variable-length batches with
// lengths 0 and 1, a window with softcap, ALiBi and sinks; each case with the families pinned in turn
// (sm80, and auto: the sm90 kernels where they take a slice on a Hopper device). Outputs are poisoned
// (NaN) and framed by guard bytes that must survive; NaN never passes; the backward runs on the GPU
// forward's own o and lse, in both dQ modes. Also: padded rows (v, o, dout, dv with row strides past
// head_dim_v, NaN in v's padding) must neither be read nor written; impl = naive's forward takes
// head_dim_v too; what stays refused on cuda is refused with nothing written.
// Relative errors ||got - ref|| / ||ref|| < 1e-2; lse within 2e-2; dsink as tests/cuda/sink_cuda_test.cpp
// measures it (against the sum of its products' magnitudes).
// Skipped, with the reason, where there is no GPU.
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
#include "flashbox/flashbox.h"
#include "support/attention_case.hpp"
#include "support/device_buffers.hpp"
#include "support/ext_tensors.hpp"
#include "support/gpu_check.hpp"
#include "support/mods_case.hpp"
#include "support/output_error.hpp"

namespace flashbox::test {
namespace {

struct DvCase {
  ModsCase m;
  int64_t head_dim_v;
  std::vector<int> lens_q = {}, lens_k = {};  // varlen when set
  flashbox_dtype dtype = FLASHBOX_BFLOAT16;
  bool sinks = false;
};

const char *family_name(flashbox_kernel_family f) { return f == FLASHBOX_FAMILY_SM80 ? "sm80" : "auto"; }

void expect_close(const char *name, const std::vector<uint16_t> &got, const std::vector<double> &ref,
                  flashbox_dtype dtype, const std::string &kernel) {
  const RelError e = rel_error(to_double(got, dtype), ref);
  EXPECT_FALSE(e.nan) << name << " has NaN or inf (" << kernel << ")";
  EXPECT_LT(e.rel_or_inf(), 1e-2) << name << ", max abs error " << e.max_abs << " (" << kernel << ")";
}

void run_case(const DvCase &c) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(c.m.name + " seed " + std::to_string(seed) + " (FLASHBOX_TEST_SEED=" + std::to_string(seed) + ")");
  std::mt19937_64 rng(seed);
  ExtDraw draw{c.dtype, c.sinks, false};
  draw.head_dim_v = c.head_dim_v;
  const ExtTensors t(c.m, c.lens_q, c.lens_k, draw, rng);
  const ExtReference ref = ext_reference(t);
  const int64_t hq = t.c.heads_q;
  const size_t o_elems = size_t(t.total_q * hq * t.dv());

  DeviceInput q(t.q.data(), t.q.size() * 2), k(t.k.data(), t.k.size() * 2), v(t.v.data(), t.v.size() * 2);
  DeviceInput dout(t.dout.data(), t.dout.size() * 2);
  DeviceInput cu_q(t.cu_q.data(), t.cu_q.size() * 4), cu_k(t.cu_k.data(), t.cu_k.size() * 4);
  DeviceInput slopes(t.slopes.data(), t.slopes.size() * 4), sinks(t.sinks.data(), t.sinks.size() * 4);
  ASSERT_TRUE(q.ptr && k.ptr && v.ptr && dout.ptr && cu_q.ptr && cu_k.ptr && slopes.ptr && sinks.ptr)
      << "device allocation";
  flashbox_attention_ext e = call_ext(t.c, slopes.ptr);
  e.head_dim_v = c.head_dim_v;
  if (c.sinks) e.learnable_sink = static_cast<const float *>(sinks.ptr);
  if (t.varlen) {
    e.cu_seqlens_q = static_cast<const int32_t *>(cu_q.ptr), e.cu_seqlens_k = static_cast<const int32_t *>(cu_k.ptr);
    e.max_seqlen_q = t.max_q, e.max_seqlen_k = t.max_k;
  }

  for (const flashbox_kernel_family family : {FLASHBOX_FAMILY_SM80, FLASHBOX_FAMILY_AUTO}) {
    SCOPED_TRACE(std::string("family ") + family_name(family));
    detail::TuningOverrides pin = detail::tuning_overrides();
    pin.forward_family = pin.backward_family = family;
    const detail::ScopedTuning scoped(pin);

    GuardedOutput o(o_elems * 2), lse(size_t(t.total_q * hq) * 4);
    ASSERT_TRUE(o.raw && lse.raw) << "device allocation";
    flashbox_attention_args a = t.args();
    a.device = FLASHBOX_CUDA;
    a.q = q.ptr, a.k = k.ptr, a.v = v.ptr, a.o = o.ptr(), a.lse = static_cast<float *>(lse.ptr());
    ASSERT_EQ(flashbox_attention_forward_ext(&a, &e), 0) << flashbox_last_error();
    const std::string fwd_kernel = flashbox_last_kernel();
    // The slices (the name says so), or on a Hopper under auto the pair's own kernel where it has one
    // (192 / 128: tests/sm90/sm90_fwd_dv_test.cpp).
    const bool native = fwd_kernel.find("_dv" + std::to_string(c.head_dim_v) + "_") != std::string::npos;
    EXPECT_TRUE(native || fwd_kernel.find("head_dim_v = " + std::to_string(c.head_dim_v)) != std::string::npos)
        << fwd_kernel;
    if (family == FLASHBOX_FAMILY_SM80) EXPECT_EQ(fwd_kernel.rfind("cuda_flash_sm80_", 0), 0u) << fwd_kernel;
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<uint16_t> o_host(o_elems);
    std::vector<float> lse_host(size_t(t.total_q * hq));
    ASSERT_TRUE(o.back(o_host.data())) << "a guard byte around o changed (write out of bounds)";
    ASSERT_TRUE(lse.back(lse_host.data())) << "a guard byte around lse changed (write out of bounds)";
    expect_close("o", o_host, ref.o, c.dtype, fwd_kernel);
    const LseError el = lse_error(lse_host.data(), ref.lse, LseRule::minus_inf_where_reference_is);
    EXPECT_EQ(el.bad, 0) << "lse entries with the wrong finiteness (" << fwd_kernel << ")";
    EXPECT_LT(el.max_abs, 2e-2) << "lse (" << fwd_kernel << ")";

    HostDsink ref_dsink, own_dsink;
    if (c.sinks) {
      ref_dsink = host_dsink(
          t, [&](int64_t i) { return ref.o[size_t(i)]; }, [&](int64_t i) { return ref.lse[size_t(i)]; });
      own_dsink = host_dsink(
          t, [&](int64_t i) { return double(cpu::load_as_float(o_host.data(), c.dtype, i)); },
          [&](int64_t i) { return double(lse_host[size_t(i)]); });
    }
    for (int det = 0; det <= 1; ++det) {
      SCOPED_TRACE("deterministic " + std::to_string(det));
      GuardedOutput dq(t.q.size() * 2), dk(t.k.size() * 2), dv(t.v.size() * 2), dsink(size_t(hq) * 4);
      ASSERT_TRUE(dq.raw && dk.raw && dv.raw && dsink.raw) << "device allocation";
      flashbox_attention_grad_args g = grad_args_like(a, dout.ptr, dq.ptr(), dk.ptr(), dv.ptr(), det);
      flashbox_attention_ext be = e;
      if (c.sinks) be.dsink = static_cast<float *>(dsink.ptr());
      ASSERT_EQ(flashbox_attention_backward_ext(&g, &be), 0) << flashbox_last_error();
      const std::string bwd_kernel = flashbox_last_kernel();
      // The slices, or on a Hopper under auto the pair's own backward where it takes the call (192 / 128,
      // fixed length, not deterministic: tests/sm90/sm90_bwd_dv_test.cpp).
      const bool bwd_native = bwd_kernel.find("_dv" + std::to_string(c.head_dim_v)) != std::string::npos;
      EXPECT_TRUE(bwd_native || bwd_kernel.find("head_dim_v = " + std::to_string(c.head_dim_v)) != std::string::npos)
          << bwd_kernel;
      if (family == FLASHBOX_FAMILY_SM80) EXPECT_EQ(bwd_kernel.rfind("cuda_flash_bwd_sm80_", 0), 0u) << bwd_kernel;
      CUDA_OK(cudaDeviceSynchronize());
      std::vector<uint16_t> h_dq(t.q.size()), h_dk(t.k.size()), h_dv(t.v.size());
      std::vector<float> h_dsink(static_cast<size_t>(hq));
      ASSERT_TRUE(dq.back(h_dq.data())) << "a guard byte around dq changed";
      ASSERT_TRUE(dk.back(h_dk.data())) << "a guard byte around dk changed";
      ASSERT_TRUE(dv.back(h_dv.data())) << "a guard byte around dv changed";
      ASSERT_TRUE(dsink.back(h_dsink.data())) << "a guard byte around dsink changed";
      expect_close("dq", h_dq, ref.dq, c.dtype, bwd_kernel);
      expect_close("dk", h_dk, ref.dk, c.dtype, bwd_kernel);
      expect_close("dv", h_dv, ref.dv, c.dtype, bwd_kernel);
      for (int64_t h = 0; c.sinks && h < hq; ++h) {
        const double got = h_dsink[size_t(h)];
        ASSERT_TRUE(std::isfinite(got)) << "dsink[" << h << "] = " << got << " (" << bwd_kernel << ")";
        EXPECT_LT(std::fabs(got - ref.dsink[size_t(h)]), 1e-2 * std::max(ref_dsink.products[size_t(h)], 1e-30))
            << "dsink[" << h << "] = " << got << ", reference " << ref.dsink[size_t(h)] << " (" << bwd_kernel << ")";
        // The slices' sums (fp32 adds of per-slice dsink) against an fp64 sum of the GPU's o and lse.
        EXPECT_LE(std::fabs(got - own_dsink.dsink[size_t(h)]), 1e-4 * std::max(own_dsink.products[size_t(h)], 1e-30))
            << "dsink[" << h << "] = " << got << ", host sum " << own_dsink.dsink[size_t(h)] << " (" << bwd_kernel
            << ")";
      }
    }
    std::printf("  %-52s %s ok  kernel %s  seed %llu\n", c.m.name.c_str(), family_name(family), fwd_kernel.c_str(),
                static_cast<unsigned long long>(seed));
  }
}

struct Dims {
  int64_t d, dv;
};
// DeepSeek's 192 / 128 and 128 / 64 (V narrower); MLA's 64 / 512 (two slices); 128 / 256 and 64 / 256
// (one slice at 256, Q and K padded).
constexpr Dims kDims[] = {{192, 128}, {128, 64}, {64, 512}, {128, 256}, {64, 256}};

std::string dims_name(const Dims &x) { return "d" + std::to_string(x.d) + "/dv" + std::to_string(x.dv); }

DvCase make(const Dims &x, std::string name, int64_t batch, int64_t sq, int64_t sk, int64_t hq, int64_t hk, int causal,
            flashbox_dtype dtype = FLASHBOX_BFLOAT16) {
  DvCase c;
  c.m.name = name + " " + dims_name(x) + (dtype == FLASHBOX_FLOAT16 ? " fp16" : "");
  c.m.batch = batch, c.m.seqlen_q = sq, c.m.seqlen_k = sk, c.m.heads_q = hq, c.m.heads_kv = hk;
  c.m.head_dim = x.d, c.m.causal = causal;
  c.head_dim_v = x.dv, c.dtype = dtype;
  return c;
}

TEST(HeadDimVCuda, FixedLength) {
  SKIP_WITHOUT_GPU();
  for (const Dims &x : kDims) {
    run_case(make(x, "1x17 GQA", 2, 1, 17, 4, 2, 0));
    run_case(make(x, "causal 1x65 MQA", 1, 1, 65, 2, 1, 1, FLASHBOX_FLOAT16));
    run_case(make(x, "T17 GQA", 2, 17, 17, 4, 2, 0, FLASHBOX_FLOAT16));
    run_case(make(x, "causal T17", 2, 17, 17, 2, 2, 1));
    run_case(make(x, "causal 17x65 GQA", 1, 17, 65, 4, 2, 1));
    run_case(make(x, "causal 65x17 MQA (keyless rows)", 1, 65, 17, 2, 1, 1, FLASHBOX_FLOAT16));
    run_case(make(x, "T65", 1, 65, 65, 2, 2, 0));
  }
}

TEST(HeadDimVCuda, Length1000) {
  SKIP_WITHOUT_GPU();
  for (const Dims &x : kDims) {
    run_case(make(x, "causal T1000 GQA", 1, 1000, 1000, 2, 1, 1));
    run_case(make(x, "300x1000", 1, 300, 1000, 2, 2, 0, FLASHBOX_FLOAT16));
  }
}

// Lengths 0 and 1, a sequence with queries and no key (every row keyless), one with keys and no query.
TEST(HeadDimVCuda, VariableLength) {
  SKIP_WITHOUT_GPU();
  for (const Dims &x : kDims)
    for (int causal = 0; causal <= 1; ++causal) {
      DvCase c = make(x, causal ? "varlen causal GQA" : "varlen GQA", 0, 0, 0, 4, 2, causal,
                      causal ? FLASHBOX_BFLOAT16 : FLASHBOX_FLOAT16);
      c.lens_q = {0, 1, 17, 65, 33}, c.lens_k = {5, 1, 0, 65, 70};
      run_case(c);
    }
}

// The extension's other fields through the slices: a window with softcap, ALiBi per batch entry and
// learnable sinks (dsink summed over the slices).
TEST(HeadDimVCuda, WindowSoftcapAlibiSinks) {
  SKIP_WITHOUT_GPU();
  for (const Dims &x : kDims) {
    DvCase c = make(x, "window(24,8) softcap 5 alibi sinks 65x80 GQA", 2, 65, 80, 4, 2, 0);
    c.m.window_left = 24, c.m.window_right = 8, c.m.softcap = 5.0f, c.m.alibi = Alibi::batch;
    c.sinks = true;
    run_case(c);
    DvCase v = make(x, "varlen causal window(32,0) sinks", 0, 0, 0, 2, 1, 1, FLASHBOX_FLOAT16);
    v.m.window_left = 32;
    v.lens_q = {1, 0, 65, 40}, v.lens_k = {1, 3, 65, 100};
    v.sinks = true;
    run_case(v);
  }
}

// A dense [rows, width] 16-bit tensor laid out with a row stride of `stride` >= width, the padding
// filled with `fill`.
std::vector<uint16_t> with_row_stride(const std::vector<uint16_t> &dense, int64_t width, int64_t stride,
                                      uint16_t fill) {
  const int64_t rows = int64_t(dense.size()) / width;
  std::vector<uint16_t> out(size_t(rows * stride), fill);
  for (int64_t r = 0; r < rows; ++r) std::copy_n(dense.begin() + r * width, width, out.begin() + r * stride);
  return out;
}
std::vector<uint16_t> without_row_stride(const std::vector<uint16_t> &padded, int64_t width, int64_t stride) {
  const int64_t rows = int64_t(padded.size()) / stride;
  std::vector<uint16_t> out(size_t(rows * width));
  for (int64_t r = 0; r < rows; ++r) std::copy_n(padded.begin() + r * stride, width, out.begin() + r * width);
  return out;
}
// Whether every padding element (columns width.. of each row) still holds the poison (0xffff).
bool padding_poisoned(const std::vector<uint16_t> &padded, int64_t width, int64_t stride) {
  for (size_t i = 0; i < padded.size(); ++i)
    if (int64_t(i) % stride >= width && padded[i] != 0xffff) return false;
  return true;
}

// v with rows of head_dim_v + 64 (NaN in the padding: a read of it would show), o and dout with
// head_dim_v + 32, dv with head_dim_v + 16: the slices read the caller's tensors where they are (or
// copy the used columns) and write only the head_dim_v columns of each row.
TEST(HeadDimVCuda, PaddedRows) {
  SKIP_WITHOUT_GPU();
  for (const Dims &x : kDims) {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE(dims_name(x) + " seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    DvCase c = make(x, "padded rows", 2, 33, 47, 4, 2, 1);
    ExtDraw draw{c.dtype, false, false};
    draw.head_dim_v = x.dv;
    const ExtTensors t(c.m, {}, {}, draw, rng);
    const ExtReference ref = ext_reference(t);
    const int64_t dv = x.dv, sv = dv + 64, so = dv + 32, sdv = dv + 16;
    const uint16_t nan16 = c.dtype == FLASHBOX_BFLOAT16 ? 0x7fc0 : 0x7e00;
    const std::vector<uint16_t> v_padded = with_row_stride(t.v, dv, sv, nan16);
    const std::vector<uint16_t> dout_padded = with_row_stride(t.dout, dv, so, nan16);
    DeviceInput q(t.q.data(), t.q.size() * 2), k(t.k.data(), t.k.size() * 2);
    DeviceInput v(v_padded.data(), v_padded.size() * 2), dout(dout_padded.data(), dout_padded.size() * 2);
    const int64_t rows_q = t.total_q * c.m.heads_q, rows_k = t.total_k * c.m.heads_kv;
    GuardedOutput o(size_t(rows_q * so) * 2), lse(size_t(rows_q) * 4);
    ASSERT_TRUE(q.ptr && k.ptr && v.ptr && dout.ptr && o.raw && lse.raw) << "device allocation";
    flashbox_attention_args a = t.args();
    a.device = FLASHBOX_CUDA;
    a.q = q.ptr, a.k = k.ptr, a.v = v.ptr, a.o = o.ptr(), a.lse = static_cast<float *>(lse.ptr());
    const int64_t hq = c.m.heads_q, hk = c.m.heads_kv, sq = c.m.seqlen_q, sk = c.m.seqlen_k;
    const int64_t vs[3] = {sk * hk * sv, hk * sv, sv}, os[3] = {sq * hq * so, hq * so, so};
    std::copy_n(vs, 3, a.v_stride), std::copy_n(os, 3, a.o_stride);
    flashbox_attention_ext e = flashbox_attention_ext_default();
    e.head_dim_v = dv;
    ASSERT_EQ(flashbox_attention_forward_ext(&a, &e), 0) << flashbox_last_error();
    const std::string fwd_kernel = flashbox_last_kernel();
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<uint16_t> o_padded(size_t(rows_q * so));
    ASSERT_TRUE(o.back(o_padded.data())) << "a guard byte around o changed";
    EXPECT_TRUE(padding_poisoned(o_padded, dv, so)) << "o written past head_dim_v in a row (" << fwd_kernel << ")";
    expect_close("o", without_row_stride(o_padded, dv, so), ref.o, c.dtype, fwd_kernel);

    GuardedOutput dq(t.q.size() * 2), dk(t.k.size() * 2), dvg(size_t(rows_k * sdv) * 2);
    ASSERT_TRUE(dq.raw && dk.raw && dvg.raw) << "device allocation";
    flashbox_attention_grad_args g = grad_args_like(a, dout.ptr, dq.ptr(), dk.ptr(), dvg.ptr(), 0);
    const int64_t dvs[3] = {sk * hk * sdv, hk * sdv, sdv};
    std::copy_n(dvs, 3, g.dv_stride);
    ASSERT_EQ(flashbox_attention_backward_ext(&g, &e), 0) << flashbox_last_error();
    const std::string bwd_kernel = flashbox_last_kernel();
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<uint16_t> h_dq(t.q.size()), h_dk(t.k.size()), dv_padded(size_t(rows_k * sdv));
    ASSERT_TRUE(dq.back(h_dq.data()) && dk.back(h_dk.data())) << "a guard byte around dq or dk changed";
    ASSERT_TRUE(dvg.back(dv_padded.data())) << "a guard byte around dv changed";
    EXPECT_TRUE(padding_poisoned(dv_padded, dv, sdv)) << "dv written past head_dim_v in a row (" << bwd_kernel << ")";
    expect_close("dq", h_dq, ref.dq, c.dtype, bwd_kernel);
    expect_close("dk", h_dk, ref.dk, c.dtype, bwd_kernel);
    expect_close("dv", without_row_stride(dv_padded, dv, sdv), ref.dv, c.dtype, bwd_kernel);
  }
}

// impl = naive on cuda (cuBLAS and a softmax kernel) runs the slices as well.
TEST(HeadDimVCuda, NaiveForward) {
  SKIP_WITHOUT_GPU();
  for (const Dims &x : kDims) {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE(dims_name(x) + " seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    DvCase c = make(x, "naive", 2, 17, 65, 4, 2, 1);
    ExtDraw draw{c.dtype, false, false};
    draw.head_dim_v = x.dv;
    const ExtTensors t(c.m, {}, {}, draw, rng);
    const ExtReference ref = ext_reference(t);
    DeviceInput q(t.q.data(), t.q.size() * 2), k(t.k.data(), t.k.size() * 2), v(t.v.data(), t.v.size() * 2);
    GuardedOutput o(ref.o.size() * 2), lse(ref.lse.size() * 4);
    ASSERT_TRUE(q.ptr && k.ptr && v.ptr && o.raw && lse.raw) << "device allocation";
    flashbox_attention_args a = t.args();
    a.device = FLASHBOX_CUDA, a.impl = FLASHBOX_NAIVE;
    a.q = q.ptr, a.k = k.ptr, a.v = v.ptr, a.o = o.ptr(), a.lse = static_cast<float *>(lse.ptr());
    flashbox_attention_ext e = flashbox_attention_ext_default();
    e.head_dim_v = x.dv;
    ASSERT_EQ(flashbox_attention_forward_ext(&a, &e), 0) << flashbox_last_error();
    const std::string kernel = flashbox_last_kernel();
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<uint16_t> o_host(ref.o.size());
    std::vector<float> lse_host(ref.lse.size());
    ASSERT_TRUE(o.back(o_host.data()) && lse.back(lse_host.data())) << "a guard byte around o or lse changed";
    expect_close("o", o_host, ref.o, c.dtype, kernel);
    const LseError el = lse_error(lse_host.data(), ref.lse, LseRule::minus_inf_where_reference_is);
    EXPECT_EQ(el.bad, 0) << kernel;
    EXPECT_LT(el.max_abs, 2e-2) << kernel;
  }
}

// What cuda still refuses with a head_dim_v of its own, by name and with nothing written: the fields
// no CUDA kernel takes (num_splits; qv with document ids), impl = naive's missing extension fields and
// backward.
TEST(HeadDimVCuda, Refusals) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(3);
  const Dims x{64, 512};
  DvCase c = make(x, "refusals", 1, 17, 17, 2, 2, 0);
  ExtDraw draw{c.dtype, false, false};
  draw.head_dim_v = x.dv;
  const ExtTensors t(c.m, {}, {}, draw, rng);
  DeviceInput q(t.q.data(), t.q.size() * 2), k(t.k.data(), t.k.size() * 2), v(t.v.data(), t.v.size() * 2);
  DeviceInput dout(t.dout.data(), t.dout.size() * 2);
  GuardedOutput o(t.dout.size() * 2), lse(size_t(t.total_q * c.m.heads_q) * 4);
  GuardedOutput dq(t.q.size() * 2), dk(t.k.size() * 2), dv(t.v.size() * 2);
  ASSERT_TRUE(q.ptr && k.ptr && v.ptr && dout.ptr && o.raw && lse.raw && dq.raw && dk.raw && dv.raw)
      << "device allocation";
  flashbox_attention_args a = t.args();
  a.device = FLASHBOX_CUDA;
  a.q = q.ptr, a.k = k.ptr, a.v = v.ptr, a.o = o.ptr(), a.lse = static_cast<float *>(lse.ptr());
  const auto untouched = [](const GuardedOutput &out) {
    std::vector<uint8_t> host;
    return out.back(host) && std::all_of(host.begin(), host.end(), [](uint8_t b) { return b == 0xff; });
  };
  const auto expect_refused = [&](int rc, const char *what) {
    EXPECT_EQ(rc, FLASHBOX_ERR_UNSUPPORTED_IMPL) << flashbox_last_error();
    EXPECT_NE(std::string(flashbox_last_error()).find(what), std::string::npos) << flashbox_last_error();
    EXPECT_TRUE(untouched(o) && untouched(lse) && untouched(dq) && untouched(dk) && untouched(dv))
        << "a refused call wrote an output";
  };
  {
    SCOPED_TRACE("qv with document ids");  // qv runs on the explicit forward, which takes no documents
    flashbox_attention_ext e = flashbox_attention_ext_default();
    e.head_dim_v = x.dv, e.qv = dout.ptr;
    std::copy_n(a.o_stride, 3, e.qv_stride);
    e.document_ids_q = e.document_ids_k = static_cast<const int32_t *>(dout.ptr);  // refused before any read
    expect_refused(flashbox_attention_forward_ext(&a, &e), "qv with document_ids");
  }
  {
    SCOPED_TRACE("num_splits");
    flashbox_attention_ext e = flashbox_attention_ext_default();
    e.head_dim_v = x.dv, e.num_splits = 2;
    expect_refused(flashbox_attention_forward_ext(&a, &e), "num_splits");
  }
  {
    SCOPED_TRACE("naive with softcap");
    flashbox_attention_args n = a;
    n.impl = FLASHBOX_NAIVE;
    flashbox_attention_ext e = flashbox_attention_ext_default();
    e.head_dim_v = x.dv, e.softcap = 5.0f;
    expect_refused(flashbox_attention_forward_ext(&n, &e), "softcap");
  }
  {
    SCOPED_TRACE("naive backward");
    flashbox_attention_grad_args g = grad_args_like(a, dout.ptr, dq.ptr(), dk.ptr(), dv.ptr(), 0);
    g.fwd.impl = FLASHBOX_NAIVE;
    flashbox_attention_ext e = flashbox_attention_ext_default();
    e.head_dim_v = x.dv;
    expect_refused(flashbox_attention_backward_ext(&g, &e), "impl = naive");
  }
}

}  // namespace
}  // namespace flashbox::test
