// FlashAttention-3's "same precision" reference of an fp8 forward, the yardstick its tests hold the
// fp8 kernels to (hopper/test_flash_attn.py: attention_ref with upcast=False, reorder_ops=True,
// intermediate_dtype=float8_e4m3fn; the kernel's error against the fp64 reference must be within twice
// this emulation's, plus the output's own rounding). From the dequantized inputs:
//   q' = bf16(q * softmax_scale), k' = bf16(k), v' = bf16(v)
//   s_ij = bf16(q'_i . k'_j)                  (fp32 sums; masked: -inf)
//   p_ij = bf16(e4m3(bf16(softmax_j(s_i))))   (P quantized to e4m3 for the P.V product)
//   o_i  = out_dtype(sum_j p_ij v'_j)         (fp32 sums); a row with no key: 0
// Fixed-length calls with the mask of `m` (causal, windows, chunks, documents); no softcap, ALiBi or
// sinks. Tensors dense [batch, seq, heads, d]; the result dense like o, as doubles.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/dtype.hpp"
#include "core/float8.hpp"
#include "core/masks.hpp"
#include "flashbox/flashbox.h"

namespace flashbox::test {

struct Fp8Shape {
  int64_t batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim;
  float scale;  // the resolved softmax scale
};

inline std::vector<double> fp8_same_precision_attention(const std::vector<float> &q, const std::vector<float> &k,
                                                        const std::vector<float> &v, const Fp8Shape &p,
                                                        const core::ScoreMods &m, flashbox_dtype out) {
  const auto bf16 = [](float x) { return cpu::round_to_dtype(x, FLASHBOX_BFLOAT16); };
  const int64_t D = p.head_dim, group = p.heads_q / p.heads_kv;
  std::vector<double> o(size_t(p.batch * p.seqlen_q * p.heads_q * D), 0.0);
  std::vector<float> qs(static_cast<size_t>(D)), s(static_cast<size_t>(p.seqlen_k)), acc(static_cast<size_t>(D));
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h)
      for (int64_t i = 0; i < p.seqlen_q; ++i) {
        const float *qi = q.data() + ((b * p.seqlen_q + i) * p.heads_q + h) * D;
        for (int64_t c = 0; c < D; ++c) qs[size_t(c)] = bf16(bf16(qi[c]) * p.scale);
        float mx = -INFINITY;
        for (int64_t j = 0; j < p.seqlen_k; ++j) {
          s[size_t(j)] = -INFINITY;
          if (!core::visible(m, b, h, i, j, p.seqlen_q, p.seqlen_k)) continue;
          const float *kj = k.data() + ((b * p.seqlen_k + j) * p.heads_kv + h / group) * D;
          float dot = 0.f;
          for (int64_t c = 0; c < D; ++c) dot += qs[size_t(c)] * bf16(kj[c]);
          s[size_t(j)] = bf16(dot);
          mx = std::max(mx, s[size_t(j)]);
        }
        if (mx == -INFINITY) continue;  // no key: o = 0
        float sum = 0.f;
        for (int64_t j = 0; j < p.seqlen_k; ++j) sum += s[size_t(j)] == -INFINITY ? 0.f : std::exp(s[size_t(j)] - mx);
        std::fill(acc.begin(), acc.end(), 0.f);
        for (int64_t j = 0; j < p.seqlen_k; ++j) {
          if (s[size_t(j)] == -INFINITY) continue;
          const float pj = bf16(core::e4m3_to_float(core::float_to_e4m3(bf16(std::exp(s[size_t(j)] - mx) / sum))));
          const float *vj = v.data() + ((b * p.seqlen_k + j) * p.heads_kv + h / group) * D;
          for (int64_t c = 0; c < D; ++c) acc[size_t(c)] += pj * bf16(vj[c]);
        }
        double *oi = o.data() + ((b * p.seqlen_q + i) * p.heads_q + h) * D;
        for (int64_t c = 0; c < D; ++c) oi[c] = cpu::round_to_dtype(acc[size_t(c)], out);
      }
  return o;
}

}  // namespace flashbox::test
