// Naive CPU backward: for each (batch, query head) the whole seqlen_q x seqlen_k matrices P and dS are
// materialised (the T² scratch this level exists to show), P recomputed from the forward's LSE:
//   P = exp(S' − LSE) (S' = softcap, ALiBi of scale · Q Kᵀ, masked),  dV += Pᵀ dO,  dP = dO Vᵀ,
//   dS = P ∘ (dP − D) ∘ softcap'(S),
//   dQ = scale · dS K,  dK += scale · dSᵀ Q.
// Q, K, dQ, dK have head_dim columns; V, dO, dV head_dim_v (the extension's; head_dim unless set).
// Parallel over (batch, kv head): a group's query heads run in order inside one task, so dK/dV sums
// have one owner and the result does not depend on the thread count.
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "core/call_state.hpp"
#include "core/error.hpp"
#include "cpu/attention_backward.hpp"

namespace flashbox::cpu::backward {

// Per thread: P and dS [SQ, SK]; Q, dQ [SQ, D]; dO [SQ, DV]; K, dK [SK, D]; V, dV [SK, DV].
int64_t naive_thread_elements(const Problem &p) {
  return 2 * p.seqlen_q * p.seqlen_k + 2 * p.seqlen_q * p.head_dim + p.seqlen_q * p.head_dim_v +
         2 * p.seqlen_k * p.head_dim + 2 * p.seqlen_k * p.head_dim_v;
}

int naive(const Problem &p) {
  const detail::GradProblem &g = *p.g;
  const int64_t SQ = p.seqlen_q, SK = p.seqlen_k, D = p.head_dim, DV = p.head_dim_v;
  const int threads = threads_for(p);
  const int64_t per_thread = naive_thread_elements(p);
  Scratch scratch;
  std::vector<float> rowsum, work;
  if (!scratch.allocate(rowsum, p.batch * p.heads_q * SQ) || !scratch.allocate(work, per_thread * threads))
    return detail::fail(FLASHBOX_ERR_OUT_OF_MEMORY, "cpu naive backward: cannot allocate " +
                                                        std::to_string((per_thread * threads) * 4) +
                                                        " bytes of scratch for P and dS");
  compute_rowsum(p, rowsum.data());

#pragma omp parallel for collapse(2) schedule(dynamic) num_threads(threads)
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t hk = 0; hk < p.heads_kv; ++hk) {
      float *P = work.data() + per_thread * omp_get_thread_num();
      float *dS = P + SQ * SK, *q = dS + SQ * SK, *dO = q + SQ * D, *dq = dO + SQ * DV;
      float *k = dq + SQ * D, *v = k + SK * D, *dk = v + SK * DV, *dv = dk + SK * D;
      load_rows(p, g.fwd.k, g.fwd.k_stride, b, hk, 0, SK, D, k);
      load_rows(p, g.fwd.v, g.fwd.v_stride, b, hk, 0, SK, DV, v);
      std::fill_n(dk, SK * D, 0.0f);
      std::fill_n(dv, SK * DV, 0.0f);
      for (int64_t h = hk * p.group; h < (hk + 1) * p.group; ++h) {
        load_rows(p, g.fwd.q, g.fwd.q_stride, b, h, 0, SQ, D, q);
        load_rows(p, g.dout, g.dout_stride, b, h, 0, SQ, DV, dO);
        const float *lse = g.fwd.lse + (b * p.heads_q + h) * SQ;
        const float *Di = rowsum.data() + (b * p.heads_q + h) * SQ;
        const float slope = p.mods.slope(b, h);
        for (int64_t i = 0; i < SQ; ++i) {
          const int64_t begin = key_begin(p, i), end = key_end(p, i);
          const bool elementwise = p.mods.elementwise();
          for (int64_t j = 0; j < SK; ++j) {
            float pij = 0.0f, grad = 1.0f;
            if (elementwise ? core::visible(p.mods, b, h, i, j, SQ, SK) : j >= begin && j < end) {
              float s = 0.0f;
              for (int64_t c = 0; c < D; ++c) s += q[i * D + c] * k[j * D + c];
              pij = std::exp(transformed_score(p, s * p.scale, slope, i, j, &grad) - lse[i]);
            }
            P[i * SK + j] = pij;
            dS[i * SK + j] = grad;  // the softcap's derivative until the next loop
          }
        }
        for (int64_t i = 0; i < SQ; ++i)
          for (int64_t j = 0; j < SK; ++j) {
            float dp = 0.0f;
            for (int64_t c = 0; c < DV; ++c) dp += dO[i * DV + c] * v[j * DV + c];
            dS[i * SK + j] *= P[i * SK + j] * (dp - Di[i]);
          }
        std::fill_n(dq, SQ * D, 0.0f);
        for (int64_t i = 0; i < SQ; ++i)
          for (int64_t j = 0; j < SK; ++j) {
            const float pij = P[i * SK + j], ds = dS[i * SK + j];
            for (int64_t c = 0; c < DV; ++c) dv[j * DV + c] += pij * dO[i * DV + c];
            for (int64_t c = 0; c < D; ++c) {
              dk[j * D + c] += ds * q[i * D + c];
              dq[i * D + c] += ds * k[j * D + c];
            }
          }
        store_rows(p, g.dq, g.dq_stride, b, h, 0, SQ, D, dq, p.scale);
      }
      store_rows(p, g.dk, g.dk_stride, b, hk, 0, SK, D, dk, p.scale);
      store_rows(p, g.dv, g.dv_stride, b, hk, 0, SK, DV, dv, 1.0f);
    }
  detail::set_kernel_name("cpu_backward_naive");
  return FLASHBOX_OK;
}

}  // namespace flashbox::cpu::backward
