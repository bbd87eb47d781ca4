// The epilogue of the Hopper backward (FA3: the dK/dV part of epilogue_bwd.hpp): after its last step
// each consumer warpgroup writes its dV and dK accumulators (fp32, wgmma's m64 accumulator layout) as
// the dtype straight from registers, dK times the softmax scale. Rows past the sequence's keys and
// columns past the call's head_dim are not written (the instantiation serves every head_dim up to
// its own, reading zeros past it). dQ leaves the kernel through the dQ writer and the convert
// kernel instead (bwd_sm90_dq_writer.cuh, flash_bwd_sm90.cu).
#pragma once
#include <cstdint>

#include "cuda/backward/sm90/bwd_sm90_traits.cuh"
#include "cuda/hopper/wgmma.cuh"

namespace flashbox::sm90::bwd {

// Writes a 64 x NC fp32 accumulator (this warpgroup's 64 keys, columns col0..; NC = COLS, or DV for
// the dV of a DV != D configuration) as the dtype, keys < seqlen_k of the sequence (varlen: the rows
// past it are the next sequence's), at token k0 + key, columns < head_dim (the call's head_dim or, for
// dV, head_dim_v; a multiple of 8: whole 8-column groups are in or out).
template <class Cfg, int NC = Cfg::COLS>
__device__ __forceinline__ void store_rows(void *out, const int64_t (&stride)[3], int b, int hk, int k0, int key_base,
                                           int seqlen_k, int col0, int head_dim, const float (&acc)[NC / 2],
                                           float mul) {
  using T = typename Cfg::Elem;
  const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
  T *base = static_cast<T *>(out) + int64_t(b) * stride[0] + int64_t(hk) * stride[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int key = key_base + warp * 16 + lane / 4 + 8 * half;
    if (key >= seqlen_k) continue;
    T *row = base + int64_t(k0 + key) * stride[1] + col0;
#pragma unroll
    for (int j = 0; j < NC / 8; ++j) {
      if (col0 + 8 * j >= head_dim) continue;
      const int i = 4 * j + 2 * half;
      *reinterpret_cast<uint32_t *>(row + 8 * j + 2 * (lane % 4)) = pack2<T>(acc[i] * mul, acc[i + 1] * mul);
    }
  }
}

}  // namespace flashbox::sm90::bwd
