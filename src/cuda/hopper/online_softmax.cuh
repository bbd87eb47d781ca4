// Online softmax on a wgmma accumulator tile (FlashAttention-2 §3.1, base-2 form as FA3).
//
// Thread view of a 64 x N fp32 accumulator (cuda/hopper/fragment.cuh): register i holds row
// 16w + g + 8 acc_half(i) and column acc_col(i) + 2q, so every thread owns two rows ("half" 0 and 1)
// and a row is spread over the 4 lanes of a quad. m is the running row max of raw scores, l
// the thread's partial sum of exp2((s - m) * scale_log2); l is reduced across the quad only once, at
// the end. A row that has seen no key keeps m = -inf and l = 0 and finishes as O = 0, LSE = -inf.
#pragma once
#include <cstdint>

#include "cuda/common/softmax_math.cuh"
#include "cuda/hopper/fragment.cuh"
#include "cuda/hopper/wgmma.cuh"

namespace flashbox::sm90 {

using flashbox::cuda::quad_max;  // cuda/common/softmax_math.cuh: a row's four lanes
using flashbox::cuda::quad_sum;

struct NoScoreTransform {
  __device__ __forceinline__ float operator()(float s) const { return s; }
};

// s becomes p = exp2(pre(s) * scale_log2 - base) (one FFMA and one exp2 each, after pre); sum gets
// each row's partial sum of p over this thread's columns (two accumulators per row shorten the chain).
template <int NS, class Pre = NoScoreTransform>
__device__ __forceinline__ void exponentiate(float (&s)[NS], const float (&base)[2], float scale_log2,
                                             float (&sum)[2], Pre pre = {}) {
  float acc[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
#pragma unroll
  for (int i = 0; i < NS; ++i) {
    const int r = acc_half(i);
    s[i] = exp2f(fmaf(pre(s[i]), scale_log2, -base[r]));
    acc[r][acc_group(i) & 1] += s[i];
  }
  sum[0] = acc[0][0] + acc[0][1], sum[1] = acc[1][0] + acc[1][1];
}

// Folds one block of scores into (m, l): s becomes p = exp2((s - m) * scale_log2), alpha the factor
// exp2((m_old - m) * scale_log2) by which the caller rescales O. With lazy_log2 > 0 the running max
// stays put while the block's max exceeds it by at most 2^lazy_log2 in p (alpha = 1, no rescale):
// still exact, since l, O and the LSE all use that same m; p and l just grow by up to 2^lazy_log2.
template <int NS>
__device__ __forceinline__ void softmax_update(float (&s)[NS], float (&m)[2], float (&l)[2], float (&alpha)[2],
                                               float scale_log2, float lazy_log2) {
  float mx[2][2] = {{m[0], m[0]}, {m[1], m[1]}};  // two partial maxima per row shorten the chain
#pragma unroll
  for (int i = 0; i < NS; ++i) mx[acc_half(i)][acc_group(i) & 1] = fmaxf(mx[acc_half(i)][acc_group(i) & 1], s[i]);
  float base[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float m_block = quad_max(fmaxf(mx[r][0], mx[r][1]));
    const bool keep = m[r] != -INFINITY && (m_block - m[r]) * scale_log2 <= lazy_log2;
    const float m_new = keep ? m[r] : m_block;
    base[r] = m_new == -INFINITY ? 0.f : m_new * scale_log2;
    alpha[r] = keep ? 1.f : exp2f(m[r] * scale_log2 - base[r]);  // 0 while the old max is -inf
    m[r] = m_new;
  }
  float sum[2];
  exponentiate(s, base, scale_log2, sum);
#pragma unroll
  for (int r = 0; r < 2; ++r) l[r] = l[r] * alpha[r] + sum[r];
}

// The largest p the optimistic update accepts: every p of the block is at most its row's partial
// sum, so sums <= 2^12 keep P far inside fp16's range (65504) and O, l far inside fp32's.
constexpr float kOptimisticSumLimit = 4096.f;

// Optimistic fold of an unmasked block after a tile's first: p = exp2((s - m) * scale_log2) against
// the running max as it stands, without the block's max, whose reduction (a max chain and two quad
// shuffles per row) delayed every exponential. Exact whenever it is accepted: m, l, O and the LSE
// share the same m, and a p above 1 just means the max grew by less than kOptimisticSumLimit (the
// lazy rescale's argument). Accepted only when every row of the warp has a finite max and partial
// sums <= the limit (inf and NaN fail); otherwise false, l and m untouched, and s is lost: the
// caller recomputes the scores and takes softmax_update. Warp-uniform result. pre: a transform of
// each score fused into the exponentials' loop (exponentiate).
template <int NS, class Pre = NoScoreTransform>
__device__ __forceinline__ bool softmax_update_optimistic(float (&s)[NS], const float (&m)[2], float (&l)[2],
                                                          float (&alpha)[2], float scale_log2, Pre pre = {}) {
  const float base[2] = {m[0] * scale_log2, m[1] * scale_log2};
  float sum[2];
  exponentiate(s, base, scale_log2, sum, pre);
  const float row0 = sum[0], row1 = sum[1];
  const bool ok = m[0] != -INFINITY && m[1] != -INFINITY && row0 <= kOptimisticSumLimit && row1 <= kOptimisticSumLimit;
  if (!__all_sync(0xffffffffu, ok)) return false;
  l[0] += row0, l[1] += row1;
  alpha[0] = alpha[1] = 1.f;
  return true;
}

// Rescales O by alpha, skipped (warp-uniformly) when no row of the warp changed its max.
template <int NO>
__device__ __forceinline__ void rescale_rows(float (&o)[NO], const float (&alpha)[2]) {
  if (!__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) return;
#pragma unroll
  for (int i = 0; i < NO; ++i) o[i] *= alpha[acc_half(i)];
}

// P (fp32 accumulator layout) -> A fragments of the P.V product: the two layouts coincide, so
// register pairs are packed in place (docs/hopper.md §2.7).
template <class T, int NS>
__device__ __forceinline__ void scores_to_a_fragments(const float (&s)[NS], uint32_t (&a)[NS / 2]) {
#pragma unroll
  for (int k = 0; k < NS / 2; ++k) a[k] = pack2<T>(s[2 * k], s[2 * k + 1]);
}

// Final 1/l scaling of O and the natural-log LSE of both rows (-inf for rows that saw no key).
template <int NO>
__device__ __forceinline__ void softmax_finalize(float (&o)[NO], const float (&m)[2], const float (&l)[2], float scale,
                                                 float (&lse)[2]) {
  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float total = quad_sum(l[r]);
    const bool empty = !(total > 0.f);  // also catches NaN
    inv[r] = empty ? 0.f : 1.f / total;
    lse[r] = empty ? -INFINITY : m[r] * scale + logf(total);
  }
#pragma unroll
  for (int i = 0; i < NO; ++i) o[i] *= inv[acc_half(i)];
}

}  // namespace flashbox::sm90
