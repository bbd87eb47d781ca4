#include "cpu/kvcache_reference_fp64.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace flashbox::cpu {

KvcacheReferenceOutput kvcache_reference_fp64(const KvcacheReferenceInput &in) {
  const int64_t B = in.batch, S = in.seqlen_q, H = in.heads_q, D = in.head_dim, G = in.heads_q / in.heads_kv;
  const int64_t DV = in.head_dim_v != 0 ? in.head_dim_v : D;
  KvcacheReferenceOutput out;
  out.o.assign(size_t(B * S * H * DV), 0.0);
  out.lse.assign(size_t(B * H * S), -std::numeric_limits<double>::infinity());
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t hk = h / G, L = in.total[size_t(b)];
      std::vector<double> s(size_t(std::max<int64_t>(L, 0)));
      for (int64_t i = 0; i < S; ++i) {
        // Query i stands at key position L - S + i (bottom-right alignment).
        const int64_t pos = L - S + i;
        const double *qr = &in.q[size_t(((b * S + i) * H + h) * D)];
        double mx = -std::numeric_limits<double>::infinity();
        std::vector<char> seen(size_t(std::max<int64_t>(L, 0)), 0);
        for (int64_t j = in.start[size_t(b)]; j < L; ++j) {
          if (in.causal && j > pos) continue;
          if (in.has_window && in.window_left >= 0 && j < pos - in.window_left) continue;
          if (in.has_window && in.window_right >= 0 && j > pos + in.window_right) continue;
          if (in.attention_chunk > 0) {  // floor division: the chunk of position pos, counted from start
            const int64_t r = pos - in.start[size_t(b)], n = in.attention_chunk;
            const int64_t c = (r >= 0 ? r / n : -((-r + n - 1) / n)) * n + in.start[size_t(b)];
            if (j < c || j >= c + n) continue;
          }
          const double *kr = &in.k[size_t(((b * in.max_keys + j) * in.heads_kv + hk) * D)];
          double dot = 0;
          for (int64_t x = 0; x < D; ++x) dot += qr[x] * kr[x];
          if (!in.qv.empty()) {
            const double *qvr = &in.qv[size_t(((b * S + i) * H + h) * DV)];
            const double *vr = &in.v[size_t(((b * in.max_keys + j) * in.heads_kv + hk) * DV)];
            for (int64_t x = 0; x < DV; ++x) dot += qvr[x] * vr[x];
          }
          double v = dot * in.scale;
          if (in.softcap > 0) v = in.softcap * std::tanh(v / in.softcap);
          if (!in.alibi_slopes.empty()) v -= in.alibi_slopes[size_t(b * in.alibi_batch_stride + h)] * double(std::llabs(pos - j));
          s[size_t(j)] = v;
          seen[size_t(j)] = 1;
          mx = std::max(mx, v);
        }
        // The sink is one more term exp(sink) of the denominator, with no value.
        const bool sink = !in.learnable_sink.empty();
        if (sink) mx = std::max(mx, in.learnable_sink[size_t(h)]);
        if (mx == -std::numeric_limits<double>::infinity()) continue;  // no visible key: o = 0, lse = -inf
        double sum = sink ? std::exp(in.learnable_sink[size_t(h)] - mx) : 0.0;
        double *orow = &out.o[size_t(((b * S + i) * H + h) * DV)];
        for (int64_t j = 0; j < L; ++j) {
          if (!seen[size_t(j)]) continue;
          const double e = std::exp(s[size_t(j)] - mx);
          sum += e;
          const double *vr = &in.v[size_t(((b * in.max_keys + j) * in.heads_kv + hk) * DV)];
          for (int64_t x = 0; x < DV; ++x) orow[x] += e * vr[x];
        }
        for (int64_t x = 0; x < DV; ++x) orow[x] /= sum;
        out.lse[size_t((b * H + h) * S + i)] = mx + std::log(sum);
      }
    }
  return out;
}

}  // namespace flashbox::cpu
