// Blocked CPU backward, FlashAttention-2's backward (§3.2, Algorithm 2) written plainly:
//   preprocess D_i = dO_i · O_i;
//   for each K/V block j (64 rows):            dK_j, dV_j accumulate in 64 x d and 64 x dv tiles
//     for each query head of the kv head's group, for each Q block i (64 rows) that sees block j:
//       S = scale · Q_i K_jᵀ,  P = exp(S' − LSE_i)  (S' = softcap, ALiBi of S; recomputed, masked)
//       dV_j += Pᵀ dO_i,  dP = dO_i V_jᵀ,  dS = P ∘ (dP − D_i) ∘ softcap'(S)
//       dK_j += dSᵀ Q_i,  dQ_i += dS K_j          (dQ in an fp32 accumulator per query head)
//   dK = scale · dK, dQ = scale · dQ.
// Masks (causal, sliding window, prefix): only the Q blocks holding rows that see block j are
// visited; tiles a block mask leaves unlisted are skipped; keys a row may not see get P = 0. Only tiles and the dQ accumulator (linear in T) live in scratch. Parallel over (batch, kv
// head), blocks in a fixed order inside a task: deterministic by construction. d is head_dim (Q, K,
// dQ, dK), dv head_dim_v (V, dO, dV: the extension's, head_dim unless set).
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "core/call_state.hpp"
#include "core/error.hpp"
#include "cpu/attention_backward.hpp"

namespace flashbox::cpu::backward {
namespace {

constexpr int64_t kBlockQ = 64, kBlockK = 64;

// The per-thread tiles of one task: q [BQ, d], dO [BQ, dv], k and dk [BK, d], v and dv [BK, dv],
// P and dS [BQ, BK].
struct Tiles {
  float *q, *dO, *k, *v, *dk, *dv, *P, *dS;
  static int64_t elements(int64_t d, int64_t d_v) {
    return kBlockQ * d + kBlockQ * d_v + 2 * kBlockK * d + 2 * kBlockK * d_v + 2 * kBlockQ * kBlockK;
  }
  Tiles(float *base, int64_t d, int64_t d_v) {
    q = base, dO = q + kBlockQ * d, k = dO + kBlockQ * d_v, v = k + kBlockK * d;
    dk = v + kBlockK * d_v, dv = dk + kBlockK * d, P = dv + kBlockK * d_v, dS = P + kBlockQ * kBlockK;
  }
};

// One (Q block, K/V block) step: rows [i0, i0+m) and keys [j0, j0+n) already loaded into t.
// dS holds the softcap's derivative between the two loops.
// `mask`: the tile's need of the element mask (core::tile_mask).
void block_step(const Problem &p, const Tiles &t, int64_t b, int64_t h, core::TileMask mask, int64_t i0, int64_t m,
                int64_t j0, int64_t n, const float *lse, const float *Di, float *dq_rows) {
  const int64_t D = p.head_dim, DV = p.head_dim_v;
  const float slope = p.mods.slope(b, h);
  const bool elementwise = p.mods.elementwise() && mask == core::TileMask::mixed;
  for (int64_t r = 0; r < m; ++r) {
    // keys of this block row r sees: [begin, end), or with element rules core::visible
    const int64_t begin = mask == core::TileMask::all ? 0 : key_begin(p, i0 + r) - j0;
    const int64_t end = mask == core::TileMask::all ? n : key_end(p, i0 + r) - j0;
    for (int64_t c = 0; c < n; ++c) {
      float pij = 0.0f, grad = 1.0f;
      if (elementwise ? core::visible(p.mods, b, h, i0 + r, j0 + c, p.seqlen_q, p.seqlen_k) : c >= begin && c < end) {
        float s = 0.0f;
        for (int64_t x = 0; x < D; ++x) s += t.q[r * D + x] * t.k[c * D + x];
        pij = std::exp(transformed_score(p, s * p.scale, slope, i0 + r, j0 + c, &grad) - lse[r]);
      }
      t.P[r * kBlockK + c] = pij;
      t.dS[r * kBlockK + c] = grad;
    }
  }
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < n; ++c) {
      const float pij = t.P[r * kBlockK + c];
      float dp = 0.0f;
      for (int64_t x = 0; x < DV; ++x) dp += t.dO[r * DV + x] * t.v[c * DV + x];
      t.dS[r * kBlockK + c] *= pij * (dp - Di[r]);
    }
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < n; ++c) {
      const float pij = t.P[r * kBlockK + c], ds = t.dS[r * kBlockK + c];
      if (pij == 0.0f && ds == 0.0f) continue;
      for (int64_t x = 0; x < DV; ++x) t.dv[c * DV + x] += pij * t.dO[r * DV + x];
      for (int64_t x = 0; x < D; ++x) {
        t.dk[c * D + x] += ds * t.q[r * D + x];
        dq_rows[r * D + x] += ds * t.k[c * D + x];
      }
    }
}

}  // namespace

int64_t blocked_thread_elements(const Problem &p) { return Tiles::elements(p.head_dim, p.head_dim_v); }

int blocked(const Problem &p) {
  const detail::GradProblem &g = *p.g;
  const int64_t SQ = p.seqlen_q, SK = p.seqlen_k, D = p.head_dim, DV = p.head_dim_v;
  const int64_t per_thread = Tiles::elements(D, DV);
  const int threads = threads_for(p);
  Scratch scratch;
  std::vector<float> rowsum, dq_acc, work;
  if (!scratch.allocate(rowsum, p.batch * p.heads_q * SQ) || !scratch.allocate(dq_acc, p.batch * p.heads_q * SQ * D) ||
      !scratch.allocate(work, per_thread * threads))
    return detail::fail(FLASHBOX_ERR_OUT_OF_MEMORY, "cpu blocked backward: cannot allocate the dQ accumulator (" +
                                                        std::to_string(p.batch * p.heads_q * SQ * D * 4) + " bytes)");
  compute_rowsum(p, rowsum.data());

#pragma omp parallel for collapse(2) schedule(dynamic) num_threads(threads)
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t hk = 0; hk < p.heads_kv; ++hk) {
      const Tiles t(work.data() + per_thread * omp_get_thread_num(), D, DV);
      for (int64_t j0 = 0; j0 < SK; j0 += kBlockK) {
        const int64_t n = std::min(kBlockK, SK - j0);
        load_rows(p, g.fwd.k, g.fwd.k_stride, b, hk, j0, n, D, t.k);
        load_rows(p, g.fwd.v, g.fwd.v_stride, b, hk, j0, n, DV, t.v);
        std::fill_n(t.dk, kBlockK * D, 0.0f);
        std::fill_n(t.dv, kBlockK * DV, 0.0f);
        // Rows that see some key of the block: from the first key's first row to the last key's last
        // (with a prefix or a block mask, core::key_rows widens them; unlisted blocks are skipped).
        const core::Range rows = core::key_rows(p.mods, b, j0, j0 + n, SQ, SK);
        const int64_t first_block = rows.begin / kBlockQ * kBlockQ;
        for (int64_t h = hk * p.group; h < (hk + 1) * p.group; ++h) {
          const int64_t row0 = (b * p.heads_q + h) * SQ;
          for (int64_t i0 = first_block; i0 < rows.end; i0 += kBlockQ) {
            const int64_t m = std::min(kBlockQ, SQ - i0);
            const core::TileMask mask = core::tile_mask(p.mods, b, h, i0, i0 + m, j0, j0 + n, SK);
            if (mask == core::TileMask::skip) continue;
            load_rows(p, g.fwd.q, g.fwd.q_stride, b, h, i0, m, D, t.q);
            load_rows(p, g.dout, g.dout_stride, b, h, i0, m, DV, t.dO);
            block_step(p, t, b, h, mask, i0, m, j0, n, g.fwd.lse + row0 + i0, rowsum.data() + row0 + i0,
                       dq_acc.data() + (row0 + i0) * D);
          }
        }
        store_rows(p, g.dk, g.dk_stride, b, hk, j0, n, D, t.dk, p.scale);
        store_rows(p, g.dv, g.dv_stride, b, hk, j0, n, DV, t.dv, 1.0f);
      }
      for (int64_t h = hk * p.group; h < (hk + 1) * p.group; ++h)
        store_rows(p, g.dq, g.dq_stride, b, h, 0, SQ, D, dq_acc.data() + (b * p.heads_q + h) * SQ * D, p.scale);
    }
  detail::set_kernel_name("cpu_backward_blocked_64x64");
  return FLASHBOX_OK;
}

}  // namespace flashbox::cpu::backward
