// Where the e4m3 decode kernel's operands sit: the byte ring's swizzle and the shared-memory offset of
// each lane's K, V and Q loads (decode_fp8_fragments.cuh says why these layouts). Host and device code:
// tests/decode/fp8_fragment_layout_test.cpp replays a warp's loads on the CPU with these same functions
// and checks the products and the bank conflicts.
#pragma once
#include "core/kvcache_rules.hpp"  // FLASHBOX_HD

namespace flashbox::cuda::decode {

template <int D>
struct Fp8Frag {
  static_assert(D == 64 || D == 128 || D == 256, "the ring swizzle is worked out for these head dims");
  static constexpr int kKSpans = D / 64;            // 64 columns of Q K^T per lane's 16-byte load
  static constexpr int kVCols = D == 64 ? 8 : 16;   // V columns a lane reads per key row and span
  static constexpr int kVSpans = D / (8 * kVCols);  // spans of 8 lanes g x kVCols columns
};

// 16-byte chunk c of ring row r sits at chunk c ^ fp8_ring_swizzle(r) (only r % 8 matters).
template <int D>
FLASHBOX_HD int fp8_ring_swizzle(int r) {
  return D == 64 ? ((r >> 1) & 2) : ((r & 6) ^ ((r & 1) << 2));
}
// Byte offset of (row, 16-byte chunk) in a stage's K or V ring ([64][D] bytes).
template <int D>
FLASHBOX_HD int fp8_ring_offset(int r, int c) {
  return r * D + ((c ^ fp8_ring_swizzle<D>(r)) << 4);
}
// Ring row (of the warp's 16) of the warp's local key n: pairs (2t, 2t + 1) swapped for odd t.
FLASHBOX_HD int fp8_key_row(int n) { return n ^ ((n >> 1) & 1); }

// Lane (g, t)'s 16 K bytes for k-steps 4 * span .. + 3 of n8 tile n: byte offset in the warp's rows.
template <int D>
FLASHBOX_HD int fp8_k_offset(int span, int n, int g, int t) {
  return fp8_ring_offset<D>(n * 8 + fp8_key_row(g), 4 * span + t);
}
// Lane (g, t)'s kVCols V bytes of key 8 * (x >> 1) + 2t + (x & 1) (x = 0..3), V span `span`.
template <int D>
FLASHBOX_HD int fp8_v_offset(int span, int x, int g, int t) {
  const int r = (x >> 1) * 8 + fp8_key_row(2 * t + (x & 1));
  if constexpr (Fp8Frag<D>::kVCols == 16) return fp8_ring_offset<D>(r, 8 * span + g);
  return fp8_ring_offset<D>(r, g >> 1) + (g & 1) * 8;
}
// Q's 8-element chunk (h = 0, 1) that lane t reads for span `span`, of rows g and g + 8.
FLASHBOX_HD int fp8_q_chunk(int span, int t, int h) { return 8 * span + 2 * t + h; }

// Which O column an output column d is in the accumulators' (n8 tile j, lane column g) order:
// j * 8 + g. Eight consecutive columns d..d + 7 (d % 8 == 0) are 8 apart there.
template <int D>
FLASHBOX_HD int fp8_o_index(int d) {
  constexpr int W = Fp8Frag<D>::kVCols;
  const int span = d / (8 * W), rem = d % (8 * W);
  return (span * W + rem % W) * 8 + rem / W;
}

}  // namespace flashbox::cuda::decode
