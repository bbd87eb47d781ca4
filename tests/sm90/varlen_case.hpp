// A variable-length case of the Hopper varlen tests (sm90_varlen_test.cpp: the forward,
// sm90_bwd_varlen_test.cpp: the backward) and what both build from it: the cu_seqlens packing of its
// lengths, the fixed-length reference call of one sequence (host tensors packed [total, heads, dim]),
// that call's core::ScoreMods, and the whole call's args and extension (device pointers set by the
// caller). ALiBi: 1 one slope per head, 2 a row of kSlopeStride(heads_q) slopes per sequence (wider
// than heads_q, so that a kernel reading the wrong row's stride is seen).
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/masks.hpp"
#include "flashbox/flashbox.h"

namespace flashbox::test {

struct VarlenShape {
  std::vector<int> lens_q, lens_k;
  int64_t heads_q = 4, heads_kv = 2, head_dim = 64;
  flashbox_dtype dtype = FLASHBOX_BFLOAT16;
  int causal = 0;
  int32_t window_left = -1, window_right = -1;
  float softcap = 0.0f;
  int alibi = 0;  // 0 off, 1 one slope per head, 2 a row of slopes per sequence

  // Elements between two sequences' slopes (alibi 2), else 0.
  int64_t slope_stride() const { return alibi == 2 ? heads_q + 3 : 0; }

  std::string name() const {
    std::string l;
    for (size_t i = 0; i < lens_q.size() && i < 12; ++i)
      l += (i ? "," : "") + std::to_string(lens_q[i]) + (lens_k[i] != lens_q[i] ? "/" + std::to_string(lens_k[i]) : "");
    if (lens_q.size() > 12) l += ",... (" + std::to_string(lens_q.size()) + " sequences)";
    return "lens [" + l + "] hq" + std::to_string(heads_q) + " hkv" + std::to_string(heads_kv) + " d" +
           std::to_string(head_dim) + (dtype == FLASHBOX_FLOAT16 ? " fp16" : " bf16") + (causal ? " causal" : "") +
           " window(" + std::to_string(window_left) + "," + std::to_string(window_right) + ")" +
           (softcap > 0 ? " softcap" + std::to_string(softcap) : "") + (alibi ? " alibi" + std::to_string(alibi) : "");
  }
};

// A case of lengths lq / lk, head_dim d, causal or not; the rest default (C: the test's own case type).
template <class C>
C varlen_case(std::vector<int> lq, std::vector<int> lk, int64_t d, int causal) {
  C c;
  c.lens_q = std::move(lq), c.lens_k = std::move(lk), c.head_dim = d, c.causal = causal;
  return c;
}

// The prefix sums of a case's lengths, the longest sequence and the totals.
struct VarlenPacking {
  std::vector<int32_t> cu_q{0}, cu_k{0};
  int64_t max_q = 0, max_k = 0, total_q = 0, total_k = 0;

  explicit VarlenPacking(const VarlenShape &c) {
    for (size_t s = 0; s < c.lens_q.size(); ++s) {
      cu_q.push_back(cu_q.back() + c.lens_q[s]), cu_k.push_back(cu_k.back() + c.lens_k[s]);
      max_q = std::max<int64_t>(max_q, c.lens_q[s]), max_k = std::max<int64_t>(max_k, c.lens_k[s]);
    }
    total_q = cu_q.back(), total_k = cu_k.back();
  }
};

// The fp64 reference's call of sequence s alone (batch 1, dense; O in the layout of Q): host tensors
// q, k, v of the whole batch, 2-byte elements packed [total, heads, head_dim].
inline flashbox_attention_args sequence_args(const VarlenShape &c, const VarlenPacking &p, int64_t s, const uint8_t *q,
                                             const uint8_t *k, const uint8_t *v) {
  const int64_t HQ = c.heads_q, HKV = c.heads_kv, D = c.head_dim, es = 2;
  const int64_t q0 = p.cu_q[size_t(s)], k0 = p.cu_k[size_t(s)], lq = c.lens_q[size_t(s)], lk = c.lens_k[size_t(s)];
  flashbox_attention_args a{};
  a.device = FLASHBOX_CPU, a.dtype = c.dtype, a.impl = FLASHBOX_FLASH;
  a.batch = 1, a.seqlen_q = lq, a.seqlen_k = lk, a.heads_q = HQ, a.heads_kv = HKV, a.head_dim = D;
  a.q_stride[0] = a.o_stride[0] = lq * HQ * D, a.q_stride[1] = a.o_stride[1] = HQ * D;
  a.q_stride[2] = a.o_stride[2] = D;
  a.k_stride[0] = a.v_stride[0] = lk * HKV * D, a.k_stride[1] = a.v_stride[1] = HKV * D;
  a.k_stride[2] = a.v_stride[2] = D;
  a.q = q + q0 * HQ * D * es, a.k = k + k0 * HKV * D * es, a.v = v + k0 * HKV * D * es;
  a.causal = c.causal;
  return a;
}

// That call's mods: the window (causal: right edge 0), softcap, and sequence s's slopes (host).
inline core::ScoreMods sequence_mods(const VarlenShape &c, const std::vector<float> &slopes, int64_t s) {
  core::ScoreMods m;
  m.window_left = c.window_left, m.window_right = c.causal ? 0 : c.window_right, m.softcap = c.softcap;
  if (c.alibi) m.alibi_slopes = slopes.data() + (c.alibi == 2 ? s * c.slope_stride() : 0);
  return m;
}

// The whole call on the device: [total, heads, dim] tensors, O's head stride o_head_stride (>= head_dim:
// guard columns past it). Pointers are the caller's.
inline flashbox_attention_args packed_args(const VarlenShape &c, const VarlenPacking &p, int64_t o_head_stride) {
  const int64_t TQ = p.total_q, TK = p.total_k, HQ = c.heads_q, HKV = c.heads_kv, D = c.head_dim, OD = o_head_stride;
  flashbox_attention_args a{};
  a.device = FLASHBOX_CUDA, a.dtype = c.dtype, a.impl = FLASHBOX_AUTO;
  a.batch = int64_t(c.lens_q.size()), a.seqlen_q = TQ, a.seqlen_k = TK;
  a.heads_q = HQ, a.heads_kv = HKV, a.head_dim = D;
  a.q_stride[0] = TQ * HQ * D, a.q_stride[1] = HQ * D, a.q_stride[2] = D;
  a.o_stride[0] = TQ * HQ * OD, a.o_stride[1] = HQ * OD, a.o_stride[2] = OD;
  a.k_stride[0] = a.v_stride[0] = TK * HKV * D, a.k_stride[1] = a.v_stride[1] = HKV * D;
  a.k_stride[2] = a.v_stride[2] = D;
  a.causal = c.causal;
  return a;
}

// Its extension: the mods (causal: no right window edge, -1), device slopes, the device prefix sums.
inline flashbox_attention_ext packed_ext(const VarlenShape &c, const VarlenPacking &p, const float *device_slopes,
                                         const void *device_cu_q, const void *device_cu_k) {
  flashbox_attention_ext e = flashbox_attention_ext_default();
  e.window_left = c.window_left, e.window_right = c.causal ? -1 : c.window_right, e.softcap = c.softcap;
  if (c.alibi) e.alibi_slopes = device_slopes, e.alibi_batch_stride = c.slope_stride();
  e.cu_seqlens_q = static_cast<const int32_t *>(device_cu_q),
  e.cu_seqlens_k = static_cast<const int32_t *>(device_cu_k);
  e.max_seqlen_q = p.max_q, e.max_seqlen_k = p.max_k;
  return e;
}

}  // namespace flashbox::test
