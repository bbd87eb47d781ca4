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

#include "cuda/common/cp_async.cuh"
#include "cuda/common/element_type.cuh"
#include "cuda/common/ldmatrix.cuh"
#include "cuda/common/mma.cuh"

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
// keeps ldmatrix free of bank conflicts); rows at or past `limit` become zeros.
template <typename Elem, int D, int kRows, int kThreads>
__device__ __forceinline__ void load_rows_async(Elem *tile, const Elem *head, int64_t row_stride, int row0, int limit,
                                                int tid) {
  constexpr int kChunks = D / 8;
  for (int c = tid; c < kRows * kChunks; c += kThreads) {
    const int r = c / kChunks, cc = c % kChunks;
    const bool valid = row0 + r < limit;
    const Elem *src = valid ? head + int64_t(row0 + r) * row_stride + cc * 8 : head;
    cp_async_16(smem_addr(tile + r * (D + 8) + cc * 8), src, valid);
  }
}

}  // namespace flashbox::cuda::bwd
