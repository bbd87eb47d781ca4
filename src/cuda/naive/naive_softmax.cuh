// The masked row softmax of naive attention: P = softmax(S) row by row, one warp per row.
// S holds already-scaled scores in fp32 ([rows, seqlen_k], dense); P is written in the input dtype
// (the operand of the P*V product), LSE in natural log. Bottom-right causal: row i (query index i
// within its head) sees keys j < i + seqlen_k - seqlen_q + 1. A row that sees no key gets P = 0 (so
// O = 0 after P*V) and LSE = -inf.
#pragma once
#include <cstdint>

#include "cuda/common/element_type.cuh"
#include "cuda/common/softmax_math.cuh"

namespace flashbox::cuda {

template <typename Element>
__global__ void naive_masked_softmax_kernel(const float *__restrict__ s, Element *__restrict__ p,
                                            float *__restrict__ lse, int64_t rows, int64_t seqlen_q, int64_t seqlen_k,
                                            int causal) {
  const int lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  const int64_t i = row % seqlen_q;
  int64_t visible = seqlen_k;
  if (causal) {
    visible = i + seqlen_k - seqlen_q + 1;
    visible = visible < 0 ? 0 : (visible > seqlen_k ? seqlen_k : visible);
  }
  const float *srow = s + row * seqlen_k;
  Element *prow = p + row * seqlen_k;

  // Pass 1: per-lane online max and sum in base 2, then combined across the warp.
  float m = -INFINITY, l = 0.f;
  for (int64_t j = lane; j < visible; j += 32) {
    const float x = srow[j] * kLog2e;
    const float m_new = fmaxf(m, x);
    l = l * fast_exp2(m - m_new) + fast_exp2(x - m_new);
    m = m_new;
  }
  const float m_row = warp_max(m);
  const float l_row = warp_sum(m == -INFINITY ? 0.f : l * fast_exp2(m - m_row));
  const float inv_l = l_row > 0.f ? 1.f / l_row : 0.f;

  // Pass 2: normalised probabilities; masked and empty entries are exactly 0.
  for (int64_t j = lane; j < seqlen_k; j += 32) {
    const float pj = j < visible ? fast_exp2(srow[j] * kLog2e - m_row) * inv_l : 0.f;
    prow[j] = ElementTraits<Element>::from_float(pj);
  }
  if (lse != nullptr && lane == 0) lse[row] = l_row > 0.f ? (m_row + log2f(l_row)) * kLn2 : -INFINITY;
}

}  // namespace flashbox::cuda
