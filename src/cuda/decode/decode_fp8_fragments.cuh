// The e4m3 cache's mma.sync operands straight from the byte ring (decode_split_kernel.cuh), converted
// in registers (decode_fp8_convert.cuh): no 16-bit copy of K or V in shared memory.
//
// m16n8k16 B fragment (mma.cuh): lane (g = lane / 4, t = lane % 4) holds b0 = (k 2t, 2t + 1; n g) and
// b1 = (k 2t + 8, 2t + 9; n g). Three relabellings, each applied to both sides of its product, make
// every lane's bytes contiguous in the ring:
//   S = Q K^T   k = head-dim column. The summation order is free, so within each 64 columns lane t's
//               4 k-steps read bytes [16t, 16t + 16) of its key row: word m (4 bytes) is k-step m's
//               b0 (bytes 0, 1) and b1 (bytes 2, 3). Q's A fragments take the same columns (held in
//               registers, re-read per block only at D256): one 16-byte load a key row feeds 8
//               registers, 4 byte permutes and the bit moves of decode_fp8_convert.cuh.
//   O += P V    k = key, n = head-dim column. The output columns are free too (undone in the merge):
//               lane g's n column of n8 tile j is column 16g + j of each 128 (8g + j at D64), so a lane
//               reads 16 (8) contiguous bytes of each of its 4 key rows (2t, 2t + 1, 2t + 8, 2t + 9)
//               and one byte permute of two rows' words gathers the pair (key 2t, key 2t + 1) of one
//               column: 4 loads of 16 bytes, then a permute and the bit moves per register, the same
//               count per byte as K. The alternatives cost more per byte: ldmatrix on bytes exists on
//               sm_100a only, and V alone through a 16-bit tile keeps half the shared-memory round
//               trip (a 16-bit store and an ldmatrix.trans per 2 bytes, and the __syncwarp pair).
//   keys        local key n of the warp's 16 is ring row n ^ ((n >> 1) & 1) (odd lanes t swap their
//               pair), so the 4 lanes t of one V load touch rows of both parities (below); the scores'
//               masks use the same map.
// Ring rows: 16-byte chunk c of row r sits at chunk c ^ fp8_ring_swizzle(r), which keeps every load
// above conflict-free (each 8-lane phase of a 16-byte load, or 16-lane phase of an 8-byte one, covers
// the 32 banks once):
//   K (16 B)   lanes g, g + 1 of a phase read rows of either parity: D64 rows are 64 bytes apart
//              (the two halves of the banks); D128 / D256 rows differ in bit 2 of the swizzle.
//   V (16 B)   a phase's 4 rows (lanes t) differ in bits 1..2 of the swizzle and its 2 lanes g in bit 0.
//   V (D64, 8 B) a phase's 4 rows: two of each parity, those of one parity differ in bit 1.
//   cp.async   16-byte writes of whole rows (or two rows at D64): the swizzle permutes a row's chunks.
// The offsets are decode_fp8_layout.hpp's, which tests/decode/fp8_fragment_layout_test.cpp replays on
// the CPU (products and bank conflicts). Per 4 cache bytes a lane spends 2 byte permutes, 2 x 3 bit
// operations (+ 2 bf16x2 multiplies for K with bf16 q) and a quarter of a 16-byte load. sm_89+'s
// cvt.rn.f16x2.e4m3x2 would replace the bit operations on sm_90 only, with unscaled values; the bit
// path is one code for sm_80 and sm_90 and keeps the 2^-8 folded into the descales.
#pragma once
#include <cstdint>

#include "cuda/common/mma.cuh"
#include "cuda/decode/decode_fp8_convert.cuh"
#include "cuda/decode/decode_fp8_layout.hpp"

namespace flashbox::cuda::decode {

// Q's A fragments of k-steps 4 * span .. 4 * span + 3 from the swizzled 16-bit [16][D] Q tile
// (decode_split_kernel.cuh's swizzle: chunk c of row r at chunk c ^ (r % 8)).
template <int D, typename T>
__device__ __forceinline__ void fp8_load_q(const T *sq, int span, int g, int t, uint32_t (&f)[4][4]) {
  auto at = [&](int r, int h) {
    const int c = fp8_q_chunk(span, t, h);
    return *reinterpret_cast<const uint4 *>(sq + r * D + ((c ^ (r & 7)) << 3));
  };
  const uint4 a = at(g, 0), b = at(g, 1), c = at(g + 8, 0), d = at(g + 8, 1);
  const uint32_t lo[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
  const uint32_t hi[8] = {c.x, c.y, c.z, c.w, d.x, d.y, d.z, d.w};
#pragma unroll
  for (int m = 0; m < 4; ++m) {
    f[m][0] = lo[2 * m], f[m][1] = hi[2 * m], f[m][2] = lo[2 * m + 1], f[m][3] = hi[2 * m + 1];
  }
}

// K's B fragments of k-steps 4 * span .. + 3 for the warp's n8 tile n (its keys 8n..8n + 7), from
// the warp's K rows `rk` ([16][D] bytes of the ring): b[m][0..1] for k-step m.
template <int D, bool kBf16>
__device__ __forceinline__ void fp8_load_k(const unsigned char *rk, int span, int n, int g, int t,
                                           uint32_t (&b)[4][2]) {
  const uint4 w = *reinterpret_cast<const uint4 *>(rk + fp8_k_offset<D>(span, n, g, t));
  const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int m = 0; m < 4; ++m) {
    b[m][0] = e4m3x2_to_16bit_scaled<kBf16, false>(words[m]);
    b[m][1] = e4m3x2_to_16bit_scaled<kBf16, true>(words[m]);
  }
}

// O += P V over V span `span` (n8 tiles span * W .. + W - 1) for the warp's 16 keys `rv` ([16][D]
// bytes of the ring), V in fp16 (P in fp16: see decode_split_kernel.cuh).
template <int D>
__device__ __forceinline__ void fp8_pv_span(const unsigned char *rv, int span, int g, int t, const uint32_t (&pf)[4],
                                            float (&acc)[D / 8][4]) {
  constexpr int W = Fp8Frag<D>::kVCols;
  constexpr int kWords = W / 4;
  uint32_t v[4][kWords];  // rows of keys 2t, 2t + 1, 2t + 8, 2t + 9
#pragma unroll
  for (int x = 0; x < 4; ++x) {
    if constexpr (W == 16) {
      const uint4 w = *reinterpret_cast<const uint4 *>(rv + fp8_v_offset<D>(span, x, g, t));
      v[x][0] = w.x, v[x][1] = w.y, v[x][2] = w.z, v[x][3] = w.w;
    } else {
      const uint2 w = *reinterpret_cast<const uint2 *>(rv + fp8_v_offset<D>(span, x, g, t));
      v[x][0] = w.x, v[x][1] = w.y;
    }
  }
#pragma unroll
  for (int jj = 0; jj < W; ++jj) {
    uint32_t b0, b1;
    switch (jj & 3) {  // the byte index must be a constant of the permute
      case 0:
        b0 = e4m3_column_pair_to_half2_scaled<0>(v[0][jj >> 2], v[1][jj >> 2]);
        b1 = e4m3_column_pair_to_half2_scaled<0>(v[2][jj >> 2], v[3][jj >> 2]);
        break;
      case 1:
        b0 = e4m3_column_pair_to_half2_scaled<1>(v[0][jj >> 2], v[1][jj >> 2]);
        b1 = e4m3_column_pair_to_half2_scaled<1>(v[2][jj >> 2], v[3][jj >> 2]);
        break;
      case 2:
        b0 = e4m3_column_pair_to_half2_scaled<2>(v[0][jj >> 2], v[1][jj >> 2]);
        b1 = e4m3_column_pair_to_half2_scaled<2>(v[2][jj >> 2], v[3][jj >> 2]);
        break;
      default:
        b0 = e4m3_column_pair_to_half2_scaled<3>(v[0][jj >> 2], v[1][jj >> 2]);
        b1 = e4m3_column_pair_to_half2_scaled<3>(v[2][jj >> 2], v[3][jj >> 2]);
        break;
    }
    mma_m16n8k16<false>(acc[span * W + jj], pf, b0, b1);
  }
}

}  // namespace flashbox::cuda::decode
