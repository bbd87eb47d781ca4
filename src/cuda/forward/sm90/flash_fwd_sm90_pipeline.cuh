// What the two Hopper forwards (bf16/fp16: flash_fwd_sm90_kernel.cuh; fp8 e4m3:
// flash_fwd_sm90_fp8_kernel.cuh) share outside their main loops: the pipeline's barrier set and its
// setup, the split of a CTA into one producer warpgroup and the consumer warpgroups, and the
// persistent tile order of fixed-length batches. Both kernels walk tiles the same way, so a change to
// the schedule reaches both.
#pragma once
#include <cstdint>

#include "cuda/hopper/async_copy.cuh"

namespace flashbox::sm90 {

// Q (one buffer) and the K and V rings (STAGES each): full_* complete with the producer's TMA bytes,
// empty_* with the consumers' releases.
struct Barriers {
  uint64_t *full_q, *empty_q, *full_k, *empty_k, *full_v, *empty_v;
};

// The barrier set at `bar` (2 + 4 * STAGES 8-byte words of shared memory), initialised by thread 0
// (full_*: one producer arrival with its bytes; empty_q: q_releases arrivals; empty_k/v: one per
// consumer warp) and visible to the CTA on return (every thread calls it: it ends in __syncthreads).
template <int STAGES, int NWG>
__device__ __forceinline__ Barriers setup_barriers(uint64_t *bar, uint32_t q_releases) {
  const Barriers bars{bar, bar + 1, bar + 2, bar + 2 + STAGES, bar + 2 + 2 * STAGES, bar + 2 + 3 * STAGES};
  if (threadIdx.x == 0) {
    mbar_init(bars.full_q, 1);
    mbar_init(bars.empty_q, q_releases);
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(bars.full_k + s, 1);
      mbar_init(bars.full_v + s, 1);
      mbar_init(bars.empty_k + s, 4 * NWG);
      mbar_init(bars.empty_v + s, 4 * NWG);
    }
    mbar_init_fence();
  }
  __syncthreads();
  return bars;
}

// Warpgroup 0 drops to PRODUCER_REGS registers and its thread 0 runs produce(); warpgroups 1.. rise
// to CONSUMER_REGS and run consume(wg) with wg = 0.. (the warpgroup index is broadcast from lane 0 so
// the compiler knows it is warp-uniform: descriptors derived from it stay in uniform registers).
template <int PRODUCER_REGS, int CONSUMER_REGS, class Produce, class Consume>
__device__ __forceinline__ void split_roles(Produce &&produce, Consume &&consume) {
  const int wg = __shfl_sync(0xffffffffu, int(threadIdx.x) / 128, 0);
  if (wg == 0) {
    setmaxnreg_dec<PRODUCER_REGS>();
    if (threadIdx.x == 0) produce();
  } else {
    setmaxnreg_inc<CONSUMER_REGS>();
    consume(wg - 1);
  }
}

// The persistent order. CTA i takes positions i, then 2G-1-i, 2G+i, ... (G = gridDim.x): a snake over
// rounds, so that the CTA that got the longest tile of one round gets the shortest of the next. A
// position may be >= the tile count in the last round: skip it. With one CTA per tile (G = tiles) it
// is the tile index.
__device__ __forceinline__ int tile_position(int round) {
  const int g = gridDim.x;
  return round * g + ((round & 1) ? g - 1 - int(blockIdx.x) : int(blockIdx.x));
}

// Fixed-length tile t of num_m_blocks query blocks per (batch, head) and heads_total = batch *
// heads_q pairs: the pairs are cut into sections of section_heads (whose K/V fit in L2 together);
// inside a section the longest query blocks come first (m descending), the section's heads fastest.
// One head per section is the plain order: head by head, m descending.
struct FixedTile {
  int m_block, h, b;
};
__device__ __forceinline__ FixedTile decode_fixed_tile(int t, int num_m_blocks, int heads_total, int section_heads,
                                                       int heads_q) {
  const int section = t / (num_m_blocks * section_heads);
  const int r = t - section * num_m_blocks * section_heads;
  const int in_section = min(section_heads, heads_total - section * section_heads);
  const int m_rank = r / in_section;
  const int hb = section * section_heads + (r - m_rank * in_section);
  return {num_m_blocks - 1 - m_rank, hb % heads_q, hb / heads_q};
}

}  // namespace flashbox::sm90
