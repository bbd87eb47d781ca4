// flashbox_attention_forward_ext with qv on device = cuda: the explicit forward (src/cuda/explicit)
// against the fp64 reference (src/cpu/reference_fp64.hpp, which adds qv . v itself): MLA decode's
// d 64 + dv 512 with one KV head, dv 256, equal dims; key counts around the kernel's 32-key chunks
// (1, 17, 63, 64, 65, 1000), seqlen_q != seqlen_k both ways, GQA/MQA; variable length with sequences
// of 0 and 1 tokens and sequences without keys; seqused_q/k; window, causal, softcap, ALiBi,
// attention_chunk and learnable sinks; rows that see no key (o = 0, lse = -inf or the sink). Outputs
// are poisoned with NaN and guarded before the call, so a row left unwritten or a write out of bounds
// fails; rows past seqused_q must keep the poison. bf16 and fp16, relative error < 1e-2. Skips
// without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/masks.hpp"
#include "cpu/reference_fp64.hpp"
#include "flashbox/flashbox.h"
#include "support/device_buffers.hpp"
#include "support/ext_tensors.hpp"
#include "support/gpu_check.hpp"

namespace flashbox::test {
namespace {

struct QvCase {
  int64_t batch = 2, seqlen_q = 1, seqlen_k = 64, heads_q = 16, heads_kv = 1, head_dim = 64, head_dim_v = 512;
  int causal = 0;
  int window_left = -1, window_right = -1;
  float softcap = 0.0f;
  int64_t chunk = 0;
  bool alibi = false, sinks = false;
  std::vector<int> lens_q, lens_k;  // variable length when given (batch = their count)
  std::vector<int> used_q, used_k;  // seqused_q / seqused_k when given
  flashbox_dtype dtype = FLASHBOX_BFLOAT16;
  float softmax_scale = 0.0f;
  bool with_qv = true;  // false: no qv (head_dim_v != head_dim with seqused_q also runs here)

  std::string name() const {
    std::string s = "B" + std::to_string(batch) + " Tq" + std::to_string(seqlen_q) + " Tk" + std::to_string(seqlen_k) +
                    " H" + std::to_string(heads_q) + "/" + std::to_string(heads_kv) + " d" + std::to_string(head_dim) +
                    "+" + std::to_string(head_dim_v) + " causal" + std::to_string(causal);
    if (window_left >= 0 || window_right >= 0)
      s += " window(" + std::to_string(window_left) + "," + std::to_string(window_right) + ")";
    if (softcap > 0) s += " softcap";
    if (chunk) s += " chunk" + std::to_string(chunk);
    if (alibi) s += " alibi";
    if (sinks) s += " sinks";
    if (!lens_q.empty()) s += " varlen";
    if (!used_q.empty() || !used_k.empty()) s += " seqused";
    if (!with_qv) s += " no-qv";
    return s + " " + cpu::dtype_name(dtype);
  }
};

// Runs the case on the GPU and checks it against the reference, sequence by sequence.
void run_case(const QvCase &c) {
  SCOPED_TRACE(c.name());
  std::mt19937_64 rng(0x5eed ^ uint64_t(c.seqlen_k * 131 + c.seqlen_q * 7 + c.head_dim_v));
  const bool varlen = !c.lens_q.empty();
  const int64_t batch = varlen ? int64_t(c.lens_q.size()) : c.batch;
  std::vector<int32_t> cu_q(1, 0), cu_k(1, 0);
  int64_t max_q = 0, max_k = 0;
  for (size_t s = 0; s < c.lens_q.size(); ++s) {
    cu_q.push_back(cu_q.back() + c.lens_q[s]), cu_k.push_back(cu_k.back() + c.lens_k[s]);
    max_q = std::max<int64_t>(max_q, c.lens_q[s]), max_k = std::max<int64_t>(max_k, c.lens_k[s]);
  }
  const int64_t tq = varlen ? cu_q.back() : c.seqlen_q, tk = varlen ? cu_k.back() : c.seqlen_k;
  const int64_t rows_q = varlen ? tq : batch * tq, rows_k = varlen ? tk : batch * tk;
  const int64_t hq = c.heads_q, hk = c.heads_kv, d = c.head_dim, dv = c.head_dim_v;
  const std::vector<uint16_t> q = random_values(size_t(rows_q * hq * d), c.dtype, rng, 1.0f);
  const std::vector<uint16_t> qv = random_values(size_t(rows_q * hq * dv), c.dtype, rng, 1.0f);
  const std::vector<uint16_t> k = random_values(size_t(rows_k * hk * d), c.dtype, rng, 1.0f);
  const std::vector<uint16_t> v = random_values(size_t(rows_k * hk * dv), c.dtype, rng, 1.0f);
  std::vector<float> slopes, sinks;
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  if (c.alibi)
    for (int64_t h = 0; h < hq; ++h) slopes.push_back(0.3f * u(rng));
  if (c.sinks)
    for (int64_t h = 0; h < hq; ++h) sinks.push_back(h == 0 ? 8.0f : 4.0f * u(rng) - 1.0f);

  DeviceInput q_d(q.data(), q.size() * 2), qv_d(qv.data(), qv.size() * 2);
  DeviceInput k_d(k.data(), k.size() * 2), v_d(v.data(), v.size() * 2);
  DeviceInput cu_q_d(cu_q.data(), cu_q.size() * 4), cu_k_d(cu_k.data(), cu_k.size() * 4);
  DeviceInput used_q_d(c.used_q.data(), c.used_q.size() * 4), used_k_d(c.used_k.data(), c.used_k.size() * 4);
  DeviceInput slopes_d(slopes.data(), slopes.size() * 4), sinks_d(sinks.data(), sinks.size() * 4);
  GuardedOutput o(size_t(rows_q * hq * dv) * 2), lse(size_t(rows_q * hq) * 4);
  ASSERT_TRUE(q_d.ptr && qv_d.ptr && k_d.ptr && v_d.ptr && o.raw && lse.raw) << "device allocation";

  flashbox_attention_args a{};
  a.device = FLASHBOX_CUDA, a.dtype = c.dtype, a.impl = FLASHBOX_AUTO;
  a.batch = batch, a.seqlen_q = tq, a.seqlen_k = tk, a.heads_q = hq, a.heads_kv = hk, a.head_dim = d;
  const int64_t qs[3] = {tq * hq * d, hq * d, d}, ks[3] = {tk * hk * d, hk * d, d};
  const int64_t vs[3] = {tk * hk * dv, hk * dv, dv}, os[3] = {tq * hq * dv, hq * dv, dv};
  std::copy_n(qs, 3, a.q_stride), std::copy_n(ks, 3, a.k_stride), std::copy_n(vs, 3, a.v_stride);
  std::copy_n(os, 3, a.o_stride);
  a.q = q_d.ptr, a.k = k_d.ptr, a.v = v_d.ptr, a.o = o.ptr(), a.lse = static_cast<float *>(lse.ptr());
  a.causal = c.causal, a.softmax_scale = c.softmax_scale;
  flashbox_attention_ext e = flashbox_attention_ext_default();
  e.head_dim_v = dv;
  if (c.with_qv) {
    e.qv = qv_d.ptr;
    std::copy_n(os, 3, e.qv_stride);
  }
  e.window_left = c.window_left, e.window_right = c.window_right;
  e.softcap = c.softcap;
  e.attention_chunk = c.chunk;
  e.alibi_slopes = c.alibi ? static_cast<const float *>(slopes_d.ptr) : nullptr;
  e.learnable_sink = c.sinks ? static_cast<const float *>(sinks_d.ptr) : nullptr;
  if (varlen) {
    e.cu_seqlens_q = static_cast<const int32_t *>(cu_q_d.ptr),
    e.cu_seqlens_k = static_cast<const int32_t *>(cu_k_d.ptr);
    e.max_seqlen_q = max_q, e.max_seqlen_k = max_k;
  }
  if (!c.used_q.empty()) e.seqused_q = static_cast<const int32_t *>(used_q_d.ptr);
  if (!c.used_k.empty()) e.seqused_k = static_cast<const int32_t *>(used_k_d.ptr);
  ASSERT_EQ(flashbox_attention_forward_ext(&a, &e), FLASHBOX_OK) << flashbox_last_error();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_NE(std::string(flashbox_last_kernel()).find("cuda_explicit"), std::string::npos) << flashbox_last_kernel();
  std::vector<uint16_t> o_host(size_t(rows_q * hq * dv));
  std::vector<float> lse_host(size_t(rows_q * hq));
  ASSERT_TRUE(o.back(o_host.data()) && lse.back(lse_host.data())) << "a guard byte around o or lse changed";

  double max_err = 0.0, max_ref = 0.0, lse_err = 0.0;
  int64_t nan = 0, bad_inf = 0, poison_lost = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t q0 = varlen ? cu_q[size_t(b)] : b * tq, k0 = varlen ? cu_k[size_t(b)] : b * tk;
    const int64_t span_q = varlen ? c.lens_q[size_t(b)] : tq, span_k = varlen ? c.lens_k[size_t(b)] : tk;
    const int64_t lq = c.used_q.empty() ? span_q : c.used_q[size_t(b)];
    const int64_t lk = c.used_k.empty() ? span_k : c.used_k[size_t(b)];
    const auto lse_at = [&](int64_t h, int64_t i) { return size_t(varlen ? h * tq + q0 + i : (b * hq + h) * tq + i); };
    for (int64_t i = lq; i < span_q; ++i)  // rows past seqused_q: untouched (FlashAttention-3)
      for (int64_t h = 0; h < hq; ++h) {
        const int64_t row = ((q0 + i) * hq + h) * dv;
        for (int64_t x = 0; x < dv; ++x) poison_lost += o_host[size_t(row + x)] != 0xffff;
        poison_lost += !std::isnan(lse_host[lse_at(h, i)]);
      }
    if (lq == 0) continue;
    flashbox_attention_args r = a;
    r.device = FLASHBOX_CPU, r.batch = 1, r.seqlen_q = lq, r.seqlen_k = lk;
    r.q = q.data() + q0 * hq * d, r.k = k.data() + k0 * hk * d, r.v = v.data() + k0 * hk * dv;
    core::ScoreMods m;
    m.window_left = c.window_left, m.window_right = c.causal ? 0 : c.window_right;
    m.softcap = c.softcap, m.chunk = c.chunk;
    m.alibi_slopes = c.alibi ? slopes.data() : nullptr;
    m.sinks = c.sinks ? sinks.data() : nullptr;
    const cpu::QvInput qv_in{qv.data() + q0 * hq * dv, os};
    std::vector<double> o_ref, lse_ref;
    cpu::reference_attention_fp64(r, o_ref, &lse_ref, &m, dv, c.with_qv ? &qv_in : nullptr);
    for (int64_t i = 0; i < lq; ++i)
      for (int64_t h = 0; h < hq; ++h) {
        const int64_t row = ((q0 + i) * hq + h) * dv, ref_row = (i * hq + h) * dv;
        for (int64_t x = 0; x < dv; ++x) {
          const double got = cpu::load_as_float(o_host.data(), c.dtype, row + x), want = o_ref[size_t(ref_row + x)];
          if (!std::isfinite(got)) ++nan;
          max_err = std::max(max_err, std::fabs(got - want));
          max_ref = std::max(max_ref, std::fabs(want));
        }
        const double want = lse_ref[size_t(h * lq + i)], got = lse_host[lse_at(h, i)];
        if (std::isinf(want))
          bad_inf += !(std::isinf(got) && got < 0);
        else
          lse_err = std::max(lse_err, std::isfinite(got) ? std::fabs(got - want) : 1e30);
      }
  }
  EXPECT_EQ(nan, 0) << "non-finite values in o";
  EXPECT_LT(max_err, 1e-2 * std::max(max_ref, 1e-3)) << "max abs error " << max_err << ", max |o_ref| " << max_ref;
  EXPECT_EQ(bad_inf, 0) << "rows that see no key must have lse = -inf";
  EXPECT_LT(lse_err, 2e-2) << "lse max abs error";
  EXPECT_EQ(poison_lost, 0) << "rows past seqused_q were written";
}

TEST(ExplicitForwardCuda, MlaDecodeKeyCounts) {
  SKIP_WITHOUT_GPU();
  for (int64_t tk : {1, 17, 63, 64, 65, 1000})
    for (int causal : {0, 1}) {
      QvCase c;
      c.seqlen_k = tk, c.causal = causal;
      run_case(c);
    }
}

TEST(ExplicitForwardCuda, HeadDimsAndQueryLengths) {
  SKIP_WITHOUT_GPU();
  const int64_t dims[][4] = {{64, 512, 16, 1}, {64, 256, 8, 2}, {128, 128, 4, 4}, {256, 64, 4, 1}, {16, 32, 6, 3}};
  const int64_t lengths[][2] = {{1, 1}, {17, 65}, {65, 17}, {64, 64}, {200, 333}};
  for (const auto &dm : dims)
    for (const auto &len : lengths)
      for (int causal : {0, 1}) {
        QvCase c;
        c.head_dim = dm[0], c.head_dim_v = dm[1], c.heads_q = dm[2], c.heads_kv = dm[3];
        c.seqlen_q = len[0], c.seqlen_k = len[1], c.causal = causal;
        run_case(c);  // causal with seqlen_q > seqlen_k: the first rows see no key
      }
}

TEST(ExplicitForwardCuda, MasksTransformsAndSinks) {
  SKIP_WITHOUT_GPU();
  QvCase base;
  base.seqlen_q = 40, base.seqlen_k = 150, base.heads_q = 8, base.heads_kv = 2;
  QvCase w = base;
  w.window_left = 20, w.window_right = 5;
  QvCase cw = base;
  cw.causal = 1, cw.window_left = 33;
  QvCase cap = base;
  cap.softcap = 10.0f, cap.softmax_scale = 0.3f;
  QvCase al = base;
  al.alibi = true, al.causal = 1;
  QvCase ch = base;
  ch.chunk = 24, ch.causal = 1;
  QvCase chw = base;
  chw.chunk = 50, chw.window_left = 10, chw.window_right = 3;
  QvCase sk = base;
  sk.sinks = true, sk.causal = 1, sk.seqlen_q = 160;  // the first 10 rows see no key: o = 0, lse = the sink
  QvCase fp16 = base;
  fp16.dtype = FLASHBOX_FLOAT16, fp16.causal = 1;
  for (const QvCase &c : {w, cw, cap, al, ch, chw, sk, fp16}) run_case(c);
}

TEST(ExplicitForwardCuda, VariableLengthAndSeqused) {
  SKIP_WITHOUT_GPU();
  QvCase c;
  c.heads_q = 8, c.heads_kv = 1;
  c.lens_q = {1, 0, 17, 5, 64, 1}, c.lens_k = {40, 9, 0, 1, 130, 65};
  for (int causal : {0, 1}) {
    c.causal = causal;
    run_case(c);
  }
  QvCase used = c;
  used.used_q = {1, 0, 9, 5, 60, 0}, used.used_k = {33, 9, 0, 1, 100, 64};
  used.causal = 1;
  run_case(used);
  QvCase fixed;  // seqused on a fixed-length batch
  fixed.batch = 3, fixed.seqlen_q = 20, fixed.seqlen_k = 70, fixed.heads_q = 4, fixed.heads_kv = 2;
  fixed.used_q = {20, 3, 0}, fixed.used_k = {70, 1, 12}, fixed.causal = 1, fixed.sinks = true;
  run_case(fixed);
  // Without qv: head_dim_v != head_dim with seqused_q takes the explicit forward (DeepSeek's 192 / 128
  // and FlashAttention-3's varlen cases with seqused), fixed length and varlen.
  for (QvCase plain : {fixed, used}) {
    plain.with_qv = false, plain.head_dim = 192, plain.head_dim_v = 128;
    run_case(plain);
  }
}

}  // namespace
}  // namespace flashbox::test
