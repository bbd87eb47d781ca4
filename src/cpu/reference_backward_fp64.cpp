// fp64 reference backward: for every (batch, kv head) and each query head of its group, the full
// T x T probabilities P in double, then dV += Pᵀ dO, dP = dO Vᵀ, D_i = Σ_j P_ij dP_ij (equal to
// dO_i · O_i), dS = P ∘ (dP − D), dQ = scale · dS K, dK += scale · dSᵀ Q. Slow and obvious on purpose;
// parallel over (batch, kv head) so that a group's dK/dV sums have a single owner. Q, K, dQ, dK have
// head_dim columns; V, dO, dV head_dim_v (dP's inner dimension).
#include "cpu/reference_backward_fp64.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "cpu/reference_fp64.hpp"

namespace flashbox::cpu {

void reference_attention_backward_fp64(const flashbox_attention_grad_args &g, std::vector<double> &dq,
                                       std::vector<double> &dk, std::vector<double> &dv, const core::ScoreMods *mods,
                                       int64_t head_dim_v, std::vector<double> *dsink) {
  const flashbox_attention_args &a = g.fwd;
  const core::ScoreMods m = mods ? *mods : core::causal_mods(a.causal);
  const int64_t B = a.batch, SQ = a.seqlen_q, SK = a.seqlen_k, HQ = a.heads_q, HKV = a.heads_kv, D = a.head_dim;
  const int64_t DV = head_dim_v != 0 ? head_dim_v : D;
  const int64_t group = HQ / HKV;
  const double scale = effective_softmax_scale(a);
  dq.assign(size_t(B * SQ * HQ * D), 0.0);
  dk.assign(size_t(B * SK * HKV * D), 0.0);
  dv.assign(size_t(B * SK * HKV * DV), 0.0);
  std::vector<double> dsink_bh(size_t(B * HQ), 0.0);  // per (batch, head): each has one owner below

#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t hk = 0; hk < HKV; ++hk) {
      std::vector<int64_t> keys;  // the keys row i sees (core::visible, tested for every key)
      std::vector<double> q, k, v, dout, p(static_cast<size_t>(SK)), dp(static_cast<size_t>(SK)),
          grad(static_cast<size_t>(SK));
      gather_head(a.k, a.dtype, a.k_stride, b, hk, SK, D, k);
      gather_head(a.v, a.dtype, a.v_stride, b, hk, SK, DV, v);
      for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
        gather_head(a.q, a.dtype, a.q_stride, b, h, SQ, D, q);
        gather_head(g.dout, a.dtype, g.dout_stride, b, h, SQ, DV, dout);
        const double slope = m.slope(b, h), cap = m.softcap;
        for (int64_t i = 0; i < SQ; ++i) {
          keys.clear();
          for (int64_t j = 0; j < SK; ++j)
            if (core::visible(m, b, h, i, j, SQ, SK)) keys.push_back(j);
          if (keys.empty()) continue;  // sees no key: O is the constant 0, every gradient through it is 0
          const double *qi = &q[size_t(i * D)], *doi = &dout[size_t(i * DV)];
          const double sink = m.sink(h);  // -inf without a sink
          double mx = sink;
          for (const int64_t j : keys) {
            double s = 0.0;
            for (int64_t c = 0; c < D; ++c) s += qi[c] * k[size_t(j * D + c)];
            const double capped = core::capped_score(s * scale, cap);
            grad[size_t(j)] = core::softcap_grad(capped, cap);
            p[size_t(j)] = capped + core::alibi_bias(slope, i, j, SQ, SK);
            mx = std::max(mx, p[size_t(j)]);
          }
          double sum = std::exp(sink - mx);  // the sink's column (0 without one)
          for (const int64_t j : keys) sum += (p[size_t(j)] = std::exp(p[size_t(j)] - mx));
          double rowsum = 0.0;  // D_i = Σ_j P_ij dP_ij (the sink's column has no value: dP = 0)
          for (const int64_t j : keys) {
            p[size_t(j)] /= sum;
            double t = 0.0;
            for (int64_t c = 0; c < DV; ++c) t += doi[c] * v[size_t(j * DV + c)];
            dp[size_t(j)] = t;
            rowsum += p[size_t(j)] * t;
          }
          dsink_bh[size_t(b * HQ + h)] -= std::exp(sink - mx) / sum * rowsum;
          double *dqi = &dq[size_t(((b * SQ + i) * HQ + h) * D)];
          for (const int64_t j : keys) {
            const double pj = p[size_t(j)];
            const double ds = pj * (dp[size_t(j)] - rowsum) * grad[size_t(j)] * scale;
            double *dkj = &dk[size_t(((b * SK + j) * HKV + hk) * D)];
            double *dvj = &dv[size_t(((b * SK + j) * HKV + hk) * DV)];
            for (int64_t c = 0; c < DV; ++c) dvj[c] += pj * doi[c];
            for (int64_t c = 0; c < D; ++c) {
              dkj[c] += ds * qi[c];
              dqi[c] += ds * k[size_t(j * D + c)];
            }
          }
        }
      }
    }
  }
  if (dsink) {
    dsink->assign(size_t(HQ), 0.0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < HQ; ++h) (*dsink)[size_t(h)] += dsink_bh[size_t(b * HQ + h)];
  }
}

}  // namespace flashbox::cpu
