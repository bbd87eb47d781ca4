// Device helpers specific to the backward kernels: the ldmatrix lane addresses of its four operand
// layouts, the row loader of its shared tiles, and the unpacking of two 16-bit elements to fp32 (the
// dO · O row sums). Element traits, cp.async, ldmatrix and the m16n8k16 product come from
// src/cuda/common, shared with the forward.
//
// mma.m16n8k16 fragments, g = lane / 4, t = lane % 4 (PTX ISA, "Matrix Fragments for mma.m16n8k16"):
//   A 16x16: a0 (row g, cols 2t..2t+1)  a1 (row g+8, cols 2t..)  a2 (row g, cols 2t+8..)  a3 (row g+8, cols 2t+8..)
//   B 16x8:  b0 (rows 2t..2t+1, col g)  b1 (rows 2t+8..2t+9, col g)
//   C 16x8:  c0,c1 (row g, cols 2t, 2t+1)  c2,c3 (row g+8, cols 2t, 2t+1)
// Two neighbouring C tiles packed to 16-bit pairs form one A fragment (P and dS never touch memory on
// their way into the next product).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/backward/sm80/flash_bwd_params.hpp"
#include "cuda/common/cp_async.cuh"
#include "cuda/common/element_type.cuh"
#include "cuda/common/ldmatrix.cuh"
#include "cuda/common/mma.cuh"
#include "cuda/common/varlen_span.cuh"

namespace flashbox::cuda::bwd {

// Two 16-bit elements packed in one 32-bit word, back to fp32 (the inverse of ElementTraits::pack).
template <typename Elem>
__device__ float2 unpack_pair(uint32_t u);

template <>
__device__ inline float2 unpack_pair<__nv_bfloat16>(uint32_t u) {
  __nv_bfloat162 v = *reinterpret_cast<__nv_bfloat162 *>(&u);
  return __bfloat1622float2(v);
}

template <>
__device__ inline float2 unpack_pair<__half>(uint32_t u) {
  __half2 v = *reinterpret_cast<__half2 *>(&u);
  return __half22float2(v);
}

// ldmatrix lane addresses for a 16x16 operand at (row0, col0) of a row-major shared tile with row
// stride `ld` elements. Matrix index m = lane / 8, row-in-matrix lane % 8.
//   A, stored [m][k]:                matrices (r0,c0) (r0+8,c0) (r0,c0+8) (r0+8,c0+8)  -> a0..a3
//   A, stored transposed [k][m]:     .trans of (k0,m0) (k0,m0+8) (k0+8,m0) (k0+8,m0+8) -> a0..a3
//   two B tiles, stored [n][k]:      (n0,k0) (n0,k0+8) (n0+8,k0) (n0+8,k0+8) -> b0,b1 of n0 and n0+8
//   two B tiles, stored [k][n]:      .trans of (k0,n0) (k0+8,n0) (k0,n0+8) (k0+8,n0+8) -> same
template <typename Elem>
__device__ __forceinline__ const Elem *frag_a_addr(const Elem *tile, int ld, int row0, int col0, int lane) {
  const int m = lane >> 3;
  return tile + (row0 + (lane & 7) + (m & 1) * 8) * ld + col0 + (m >> 1) * 8;
}
template <typename Elem>
__device__ __forceinline__ const Elem *frag_a_trans_addr(const Elem *tile, int ld, int m0, int k0, int lane) {
  const int m = lane >> 3;
  return tile + (k0 + (lane & 7) + (m >> 1) * 8) * ld + m0 + (m & 1) * 8;
}
template <typename Elem>
__device__ __forceinline__ const Elem *frag_b_nk_addr(const Elem *tile, int ld, int n0, int k0, int lane) {
  const int m = lane >> 3;
  return tile + (n0 + (lane & 7) + (m >> 1) * 8) * ld + k0 + (m & 1) * 8;
}
template <typename Elem>
__device__ __forceinline__ const Elem *frag_b_kn_addr(const Elem *tile, int ld, int k0, int n0, int lane) {
  const int m = lane >> 3;
  return tile + (k0 + (lane & 7) + (m & 1) * 8) * ld + n0 + (m >> 1) * 8;
}

// Σ_d a_d · b_d over one row of head_dim 16-bit elements, reduced over the warp (every lane gets it):
// the row sums D = rowsum(dO ∘ O) of the backward's preprocessing.
template <typename Elem>
__device__ __forceinline__ float warp_row_dot(const Elem *a, const Elem *b, int head_dim, int lane) {
  float sum = 0.0f;
  for (int c = 2 * lane; c < head_dim; c += 64) {
    const float2 x = unpack_pair<Elem>(*reinterpret_cast<const uint32_t *>(a + c));
    const float2 y = unpack_pair<Elem>(*reinterpret_cast<const uint32_t *>(b + c));
    sum += x.x * y.x + x.y * y.y;
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  return sum;
}

// Copies rows [row0, row0 + kRows) of one head into a shared tile (row stride D + 8: the 16-byte pad
// keeps ldmatrix free of bank conflicts); rows at or past `limit` become zeros, and so do the chunks
// at or past `chunk_end` (head_dim / 8: the columns a smaller head_dim lacks).
template <typename Elem, int D, int kRows, int kThreads>
__device__ __forceinline__ void load_rows_async(Elem *tile, const Elem *head, int64_t row_stride, int row0, int limit,
                                                int chunk_end, int tid) {
  constexpr int kChunks = D / 8;
  for (int c = tid; c < kRows * kChunks; c += kThreads) {
    const int r = c / kChunks, cc = c % kChunks;
    const bool valid = row0 + r < limit && cc < chunk_end;
    const Elem *src = valid ? head + int64_t(row0 + r) * row_stride + cc * 8 : head;
    cp_async_16(smem_addr(tile + r * (D + 8) + cc * 8), src, valid);
  }
}

// Batch entry (or sequence) b's place in the tensors and in the row buffers (BwdSeq).
__device__ __forceinline__ BwdSeq bwd_seq(const BwdParams &p, int b) {
  BwdSeq s;
  if (p.cu_seqlens_q) {
    const VarlenSpan v = varlen_span(p.cu_seqlens_q, p.cu_seqlens_k, b, p.total_q, p.total_k, p.seqlen_q, p.seqlen_k);
    s.bb = 0, s.q0 = v.q0, s.k0 = v.k0, s.seqlen_q = v.seqlen_q, s.seqlen_k = v.seqlen_k;
    s.rows_b = v.q0, s.rows_h = p.total_q;
  } else {
    s.bb = b, s.q0 = 0, s.k0 = 0, s.seqlen_q = p.seqlen_q, s.seqlen_k = p.seqlen_k;
    s.rows_b = int64_t(b) * p.heads_q * p.seqlen_q, s.rows_h = p.seqlen_q;
  }
  return s;
}

// Element offset of (batch entry s.bb, token t0 + 0, head h) in a tensor with `stride`.
__device__ __forceinline__ int64_t bwd_offset(const int64_t *stride, const BwdSeq &s, int t0, int h) {
  return s.bb * stride[0] + int64_t(t0) * stride[1] + h * stride[2];
}

// P (and the softcap factor of dS) of one score: raw s = q.k; lse2 = LSE * log2e (+inf: P = 0).
// Plain: exp2(s * scale_log2 - lse2). With softcap / ALiBi (uniform run-time branches): the forward's
// x = alibi(cap(scale s)), P = exp2(x log2e - lse2), and *cap_grad = 1 - (cap(scale s) / softcap)^2.
__device__ __forceinline__ float bwd_prob(const BwdParams &p, float s, float lse2, float slope, int i, int j, int shift,
                                          float *cap_grad) {
  if (!p.transforms) return exp2f(s * p.scale_log2 - lse2);
  float x = s * p.scale;
  if (p.mods.capped()) {
    x = mods_cap(p.mods, x);
    *cap_grad = mods_cap_grad(p.mods, x);
  }
  if (p.mods.alibi()) x += mods_alibi_bias(slope, i, j, shift);
  return exp2f(x * kLog2e - lse2);
}

// The two products that open every step of both backward kernels, one warp's 16 rows against NB
// columns, over the head dim in one k-loop: s = A1 B1^T and dp = A2 B2^T, A rows row0.. of the [m][k]
// tiles a1, a2 (K and V for dK/dV's S^T and dP^T; Q and dO for dQ's S and dP), B the [n][k] tiles b1,
// b2 (Q and dO; K and V), every tile with row stride ld.
template <typename Elem, int D, int NB>
__device__ __forceinline__ void score_products(float (&s)[NB / 8][4], float (&dp)[NB / 8][4], const Elem *a1,
                                               const Elem *a2, int row0, const Elem *b1, const Elem *b2, int ld,
                                               int lane) {
#pragma unroll
  for (int i = 0; i < NB / 8; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[i][e] = dp[i][e] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t x1[4], x2[4];
    ldmatrix_x4(x1, smem_addr(frag_a_addr(a1, ld, row0, kk * 16, lane)));
    ldmatrix_x4(x2, smem_addr(frag_a_addr(a2, ld, row0, kk * 16, lane)));
#pragma unroll
    for (int np = 0; np < NB / 16; ++np) {
      uint32_t y1[4], y2[4];
      ldmatrix_x4(y1, smem_addr(frag_b_nk_addr(b1, ld, np * 16, kk * 16, lane)));
      ldmatrix_x4(y2, smem_addr(frag_b_nk_addr(b2, ld, np * 16, kk * 16, lane)));
      mma_m16n16k16<ElementTraits<Elem>::is_bf16>(s[2 * np], s[2 * np + 1], x1, y1);
      mma_m16n16k16<ElementTraits<Elem>::is_bf16>(dp[2 * np], dp[2 * np + 1], x2, y2);
    }
  }
}

}  // namespace flashbox::cuda::bwd
