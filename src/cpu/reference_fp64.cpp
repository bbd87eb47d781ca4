// fp64 reference attention: for every (batch, query head, query row) the scores of the keys the row
// may see (core::visible, tested for every key: the dense mask), their max, sum of exp(s - max), and the weighted sum of values, all in double. Slow and
// obvious on purpose; parallel over (batch, head) only to keep the tests quick.
#include "cpu/reference_fp64.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/dtype.hpp"

namespace flashbox::cpu {

double effective_softmax_scale(const flashbox_attention_args &a) {
  return a.softmax_scale != 0.0f ? double(a.softmax_scale) : 1.0 / std::sqrt(double(a.head_dim));
}

void gather_head(const void *base, flashbox_dtype t, const int64_t *stride, int64_t b, int64_t h, int64_t n, int64_t d,
                 std::vector<double> &dst) {
  dst.resize(size_t(n * d));
  for (int64_t r = 0; r < n; ++r) {
    const int64_t off = b * stride[0] + r * stride[1] + h * stride[2];
    for (int64_t c = 0; c < d; ++c) dst[size_t(r * d + c)] = load_as_float(base, t, off + c);
  }
}

void reference_attention_fp64(const flashbox_attention_args &a, std::vector<double> &out, std::vector<double> *lse,
                              const core::ScoreMods *mods, int64_t head_dim_v, const QvInput *qv_in) {
  const core::ScoreMods m = mods ? *mods : core::causal_mods(a.causal);
  const int64_t B = a.batch, SQ = a.seqlen_q, SK = a.seqlen_k, HQ = a.heads_q, D = a.head_dim;
  const int64_t DV = head_dim_v != 0 ? head_dim_v : D;
  const int64_t group = a.heads_q / a.heads_kv;
  const double scale = qv_in && a.softmax_scale == 0.0f ? 1.0 / std::sqrt(double(D + DV)) : effective_softmax_scale(a);
  out.assign(size_t(B * SQ * HQ * DV), 0.0);
  if (lse) lse->assign(size_t(B * HQ * SQ), -std::numeric_limits<double>::infinity());

#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < HQ; ++h) {
      std::vector<double> q, k, v, s, qv;
      std::vector<int64_t> keys;  // the keys row i sees
      gather_head(a.q, a.dtype, a.q_stride, b, h, SQ, D, q);
      if (qv_in) gather_head(qv_in->data, a.dtype, qv_in->stride, b, h, SQ, DV, qv);
      gather_head(a.k, a.dtype, a.k_stride, b, h / group, SK, D, k);
      gather_head(a.v, a.dtype, a.v_stride, b, h / group, SK, DV, v);
      s.resize(size_t(SK));
      const double slope = m.slope(b, h), cap = m.softcap;
      for (int64_t i = 0; i < SQ; ++i) {
        keys.clear();
        for (int64_t j = 0; j < SK; ++j)
          if (core::visible(m, b, h, i, j, SQ, SK)) keys.push_back(j);
        double *o = &out[size_t(((b * SQ + i) * HQ + h) * DV)];
        const double sink = m.sink(h);  // -inf without a sink
        if (keys.empty()) {             // sees no key: O = 0, LSE = -inf (already set) or the sink
          if (lse && m.sinks) (*lse)[size_t((b * HQ + h) * SQ + i)] = sink;
          continue;
        }
        double mx = sink;
        for (const int64_t j : keys) {
          double dot = 0.0;
          for (int64_t c = 0; c < D; ++c) dot += q[size_t(i * D + c)] * k[size_t(j * D + c)];
          if (qv_in)
            for (int64_t c = 0; c < DV; ++c) dot += qv[size_t(i * DV + c)] * v[size_t(j * DV + c)];
          s[size_t(j)] = core::capped_score(dot * scale, cap) + core::alibi_bias(slope, i, j, SQ, SK);
          mx = std::max(mx, s[size_t(j)]);
        }
        double sum = std::exp(sink - mx);  // the sink's column (0 without one)
        for (const int64_t j : keys) {
          s[size_t(j)] = std::exp(s[size_t(j)] - mx);
          sum += s[size_t(j)];
        }
        for (const int64_t j : keys) {
          const double p = s[size_t(j)] / sum;
          for (int64_t c = 0; c < DV; ++c) o[c] += p * v[size_t(j * DV + c)];
        }
        if (lse) (*lse)[size_t((b * HQ + h) * SQ + i)] = mx + std::log(sum);
      }
    }
  }
}

}  // namespace flashbox::cpu
