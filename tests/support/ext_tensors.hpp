// One flashbox_attention_ext call on random inputs and its fp64 reference, shared by the GPU tests of
// the extension (tests/cuda/ext_sm80_test.cpp, sink_cuda_test.cpp, head_dim_v_cuda_test.cpp): the case's mods
// (support/mods_case.hpp), fixed or variable length (lengths per sequence), 16-bit q, k, v and dout
// (bf16 or fp16; q and k optionally with outliers), ALiBi slopes and learnable sinks when asked, V and
// O with a head dim of their own when asked (head_dim_v: v, o, dout and dv have rows of it), and
// what the reference (src/cpu/reference_fp64.hpp, reference_backward_fp64.hpp) gives for them:
// o, lse, dq, dk, dv and dsink, dense in the call's layout. Host code only: a test copies the inputs to
// the device itself.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/dtype.hpp"
#include "core/masks.hpp"
#include "cpu/reference_backward_fp64.hpp"
#include "cpu/reference_fp64.hpp"
#include "flashbox/flashbox.h"
#include "support/mods_case.hpp"

namespace flashbox::test {

// n values of N(0, sigma) in `dtype` (16-bit); with outliers one in 64 is six times larger (in q and k
// they make a few rows' softmax peaked).
inline std::vector<uint16_t> random_values(size_t n, flashbox_dtype dtype, std::mt19937_64 &rng, float sigma,
                                           bool outliers = false) {
  std::normal_distribution<float> normal(0.0f, sigma);
  std::uniform_int_distribution<int> pick(0, 63);
  std::vector<uint16_t> v(n);
  for (size_t i = 0; i < n; ++i) {
    const float x = normal(rng) * (outliers && pick(rng) == 0 ? 6.0f : 1.0f);
    cpu::store_from_float(v.data(), dtype, int64_t(i), x);
  }
  return v;
}

// What the inputs are drawn with, beside the case.
struct ExtDraw {
  flashbox_dtype dtype = FLASHBOX_BFLOAT16;
  bool sinks = false;     // a learnable sink per query head
  bool outliers = false;  // outliers in q and k (random_values)
  int64_t head_dim_v = 0;  // V's and O's head dim (0: the case's head_dim)
};

// The call's tensors as the C API sees them: dense [batch, seq, heads, dim] (varlen: [total, ...];
// dim: head_dim for q and k, dv() for v, o and dout), lse [batch, heads, seq] (varlen: [heads, total_q]).
struct ExtTensors {
  ModsCase c;  // batch: the number of sequences when varlen
  ExtDraw draw;
  bool varlen;
  int64_t total_q, total_k, max_q = 0, max_k = 0;
  std::vector<int32_t> cu_q, cu_k;
  std::vector<uint16_t> q, k, v, dout;
  std::vector<float> slopes, sinks;

  // lens_q / lens_k: the sequences' lengths (empty: fixed length, c's batch and seqlens).
  ExtTensors(const ModsCase &x, const std::vector<int> &lens_q, const std::vector<int> &lens_k, const ExtDraw &d,
             std::mt19937_64 &rng)
      : c(x), draw(d), varlen(!lens_q.empty()) {
    if (varlen) {
      c.batch = int64_t(lens_q.size());
      cu_q.assign(1, 0), cu_k.assign(1, 0);
      for (size_t s = 0; s < lens_q.size(); ++s) {
        cu_q.push_back(cu_q.back() + lens_q[s]), cu_k.push_back(cu_k.back() + lens_k[s]);
        max_q = std::max<int64_t>(max_q, lens_q[s]), max_k = std::max<int64_t>(max_k, lens_k[s]);
      }
      total_q = cu_q.back(), total_k = cu_k.back();
    } else {
      total_q = c.batch * c.seqlen_q, total_k = c.batch * c.seqlen_k;
    }
    q = random_values(size_t(total_q * c.heads_q * c.head_dim), draw.dtype, rng, 1.0f, draw.outliers);
    k = random_values(size_t(total_k * c.heads_kv * c.head_dim), draw.dtype, rng, 1.0f, draw.outliers);
    v = random_values(size_t(total_k * c.heads_kv * dv()), draw.dtype, rng, 1.0f);
    dout = random_values(size_t(total_q * c.heads_q * dv()), draw.dtype, rng, 1.0f);
    slopes = random_slopes(c, rng);
    if (draw.sinks) {  // around the scores' scale; head 0's far above them, head 2's far below (no effect)
      std::normal_distribution<float> normal(0.0f, 2.0f);
      sinks.resize(size_t(c.heads_q));
      for (float &s : sinks) s = normal(rng);
      sinks[0] = 6.0f;
      if (c.heads_q > 2) sinks[2] = -30.0f;
    }
  }

  int64_t dv() const { return draw.head_dim_v ? draw.head_dim_v : c.head_dim; }
  int64_t len_q(int64_t b) const { return varlen ? cu_q[size_t(b + 1)] - cu_q[size_t(b)] : c.seqlen_q; }
  int64_t len_k(int64_t b) const { return varlen ? cu_k[size_t(b + 1)] - cu_k[size_t(b)] : c.seqlen_k; }
  // The first element of row i of head h of batch entry (or sequence) b in q, o and dout; its lse index.
  int64_t row_index(int64_t b, int64_t i, int64_t h) const {
    const int64_t token = varlen ? cu_q[size_t(b)] + i : b * c.seqlen_q + i;
    return (token * c.heads_q + h) * c.head_dim;
  }
  // The same in o and dout when they have rows of their own head dim (dv() != head_dim).
  int64_t out_row_index(int64_t b, int64_t i, int64_t h) const { return row_index(b, i, h) / c.head_dim * dv(); }
  int64_t lse_index(int64_t b, int64_t i, int64_t h) const {
    return varlen ? h * total_q + cu_q[size_t(b)] + i : (b * c.heads_q + h) * c.seqlen_q + i;
  }

  // The plain args of the whole call (pointers filled by the caller).
  flashbox_attention_args args() const {
    flashbox_attention_args a{};
    a.dtype = draw.dtype;
    a.impl = FLASHBOX_AUTO;
    a.batch = c.batch;
    a.seqlen_q = varlen ? total_q : c.seqlen_q, a.seqlen_k = varlen ? total_k : c.seqlen_k;
    a.heads_q = c.heads_q, a.heads_kv = c.heads_kv, a.head_dim = c.head_dim;
    a.causal = c.causal;
    const int64_t tq = varlen ? total_q : c.seqlen_q, tk = varlen ? total_k : c.seqlen_k;
    const int64_t d = c.head_dim, dv = this->dv();
    const int64_t qs[3] = {tq * c.heads_q * d, c.heads_q * d, d}, os[3] = {tq * c.heads_q * dv, c.heads_q * dv, dv};
    const int64_t ks[3] = {tk * c.heads_kv * d, c.heads_kv * d, d}, vs[3] = {tk * c.heads_kv * dv, c.heads_kv * dv, dv};
    std::copy_n(qs, 3, a.q_stride), std::copy_n(os, 3, a.o_stride);
    std::copy_n(ks, 3, a.k_stride), std::copy_n(vs, 3, a.v_stride);
    return a;
  }
  // The reference's mods for the whole call, or (varlen) for the call of sequence `seq` alone: with
  // ALiBi per batch entry, its row of slopes.
  core::ScoreMods mods(int64_t seq = 0) const {
    core::ScoreMods m = reference_mods(c, slopes.data());
    if (varlen && c.alibi == Alibi::batch) {
      m.alibi_slopes += seq * c.heads_q;
      m.alibi_batch_stride = 0;
    }
    if (draw.sinks) m.sinks = sinks.data();
    return m;
  }
  // Whether row i of batch entry b sees no key (then o = 0 and lse = the sink, or -inf without one).
  bool keyless(int64_t b, int64_t i) const {
    const core::ScoreMods m = mods(b);
    const int64_t lq = len_q(b), lk = len_k(b);
    return core::key_end(m, i, lq, lk) <= core::key_begin(m, i, lq, lk);
  }
};

// The fp64 reference of the whole call, dense in the call's layout, and dsink (empty without sinks).
struct ExtReference {
  std::vector<double> o, lse, dq, dk, dv, dsink;
};

inline ExtReference ext_reference(const ExtTensors &t) {
  const ModsCase &c = t.c;
  ExtReference r;
  const int64_t hq = c.heads_q, hk = c.heads_kv, d = c.head_dim, dv = t.dv();
  r.o.assign(size_t(t.total_q * hq * dv), 0.0);
  r.dq.assign(size_t(t.total_q * hq * d), 0.0);
  r.dk.assign(size_t(t.total_k * hk * d), 0.0);
  r.dv.assign(size_t(t.total_k * hk * dv), 0.0);
  r.lse.assign(size_t(t.total_q * hq), -INFINITY);
  if (t.draw.sinks) r.dsink.assign(size_t(hq), 0.0);
  const int64_t calls = t.varlen ? c.batch : 1;  // varlen: one call per sequence
  for (int64_t s = 0; s < calls; ++s) {
    const int64_t q0 = t.varlen ? t.cu_q[size_t(s)] : 0, k0 = t.varlen ? t.cu_k[size_t(s)] : 0;
    const int64_t lq = t.varlen ? t.len_q(s) : c.seqlen_q, lk = t.varlen ? t.len_k(s) : c.seqlen_k;
    if (lq == 0) continue;
    if (lk == 0) {  // every row keyless: o = 0, dq = 0 (the defaults), lse = the sink (or -inf), no dsink term
      if (t.draw.sinks)
        for (int64_t h = 0; h < hq; ++h)
          for (int64_t i = 0; i < lq; ++i) r.lse[size_t(t.lse_index(s, i, h))] = t.sinks[size_t(h)];
      continue;
    }
    flashbox_attention_args a = t.args();
    a.device = FLASHBOX_CPU;
    if (t.varlen) a.batch = 1, a.seqlen_q = lq, a.seqlen_k = lk;
    a.q = t.q.data() + q0 * hq * d, a.k = t.k.data() + k0 * hk * d, a.v = t.v.data() + k0 * hk * dv;
    const core::ScoreMods m = t.mods(s);
    std::vector<double> o, lse;
    cpu::reference_attention_fp64(a, o, &lse, &m, dv);
    flashbox_attention_grad_args g{};
    g.fwd = a;
    g.dout = t.dout.data() + q0 * hq * dv;
    std::copy_n(a.o_stride, 3, g.dout_stride);
    std::vector<double> dq, dk, dv_ref, dsink;
    cpu::reference_attention_backward_fp64(g, dq, dk, dv_ref, &m, dv, t.draw.sinks ? &dsink : nullptr);
    std::copy(o.begin(), o.end(), r.o.begin() + q0 * hq * dv);
    std::copy(dq.begin(), dq.end(), r.dq.begin() + q0 * hq * d);
    std::copy(dk.begin(), dk.end(), r.dk.begin() + k0 * hk * d);
    std::copy(dv_ref.begin(), dv_ref.end(), r.dv.begin() + k0 * hk * dv);
    for (size_t h = 0; h < dsink.size(); ++h) r.dsink[h] += dsink[h];
    if (t.varlen) {  // [1, heads, lq] -> rows q0.. of [heads, total_q]
      for (int64_t h = 0; h < hq; ++h)
        for (int64_t i = 0; i < lq; ++i) r.lse[size_t(t.lse_index(s, i, h))] = lse[size_t(h * lq + i)];
    } else {
      r.lse = lse;
    }
  }
  return r;
}

// dsink from o and lse in fp64 on the host (o_at(i), lse_at(i): element i of o and of lse as double):
// -sum over rows of exp(sink - lse) * (dout . o) per head, the sum of the terms' magnitudes, and the
// sum of the magnitudes of the products inside them (the scale dsink's error is measured against).
struct HostDsink {
  std::vector<double> dsink, magnitude, products;
};
template <class OAt, class LseAt>
HostDsink host_dsink(const ExtTensors &t, OAt o_at, LseAt lse_at) {
  const int64_t hq = t.c.heads_q, dv = t.dv();
  HostDsink r;
  r.dsink.assign(size_t(hq), 0.0), r.magnitude.assign(size_t(hq), 0.0), r.products.assign(size_t(hq), 0.0);
  for (int64_t b = 0; b < t.c.batch; ++b)
    for (int64_t i = 0; i < t.len_q(b); ++i)
      for (int64_t h = 0; h < hq; ++h) {
        const int64_t row = t.out_row_index(b, i, h);
        double dot = 0.0, dot_abs = 0.0;
        for (int64_t x = 0; x < dv; ++x) {
          const double y = o_at(row + x) * cpu::load_as_float(t.dout.data(), t.draw.dtype, row + x);
          dot += y, dot_abs += std::fabs(y);
        }
        const double p_sink = std::exp(double(t.sinks[size_t(h)]) - lse_at(t.lse_index(b, i, h)));
        r.dsink[size_t(h)] -= p_sink * dot;
        r.magnitude[size_t(h)] += p_sink * std::fabs(dot);
        r.products[size_t(h)] += p_sink * dot_abs;
      }
  return r;
}

// The backward's args for a forward call `a` whose gradients and dout are laid out like its tensors
// (dout like o, dq like q, dk like k, dv like v).
inline flashbox_attention_grad_args grad_args_like(const flashbox_attention_args &a, const void *dout, void *dq,
                                                   void *dk, void *dv, int deterministic) {
  flashbox_attention_grad_args g{};
  g.fwd = a;
  g.dout = dout;
  std::copy_n(a.o_stride, 3, g.dout_stride), std::copy_n(a.q_stride, 3, g.dq_stride);
  std::copy_n(a.k_stride, 3, g.dk_stride), std::copy_n(a.v_stride, 3, g.dv_stride);
  g.dq = dq, g.dk = dk, g.dv = dv;
  g.deterministic = deterministic;
  return g;
}

// A 16-bit tensor of `dtype` as doubles.
inline std::vector<double> to_double(const std::vector<uint16_t> &x, flashbox_dtype dtype) {
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = cpu::load_as_float(x.data(), dtype, int64_t(i));
  return out;
}

}  // namespace flashbox::test
