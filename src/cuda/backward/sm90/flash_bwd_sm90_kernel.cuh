// FlashAttention backward for Hopper (sm_90a): TMA + mbarrier ring + wgmma + warp specialisation
// (FA3 paper App. B.1 Algorithm 3; docs/hopper.md §2.2). This file says who runs what; the roles live
// beside it (FA3's hopper/ layout: flash_bwd_kernel_sm90.h, mainloop_bwd_sm90_tma_gmma_ws.hpp,
// epilogue_bwd.hpp, tile_scheduler.hpp):
//   bwd_sm90_traits.cuh      the parameters, the variant (BwdSm90Traits) and the compile-time
//                            configuration derived from it: tiles, shared-memory layout, barrier ids
//   bwd_sm90_tile_order.cuh  which tile a CTA takes, which query blocks it walks, the deterministic
//                            add order
//   bwd_sm90_producer.cuh    the TMA loads: K_j, V_j once, Q_i / dO_i through a ring
//   bwd_sm90_consumer.cuh    the math: S^T, dP^T, P^T (softmax recomputed from LSE), masks and score
//                            transforms, dS^T, dV, dK, the dQ chunks
//   bwd_sm90_dq_writer.cuh   the staged dQ chunks into the global fp32 accumulator (bulk reduce-add)
//   bwd_sm90_epilogue.cuh    dK, dV from registers to global memory
//
// One CTA per (block of BN keys, batch, kv head); 384 threads:
//   warpgroup 0 (24 registers): thread 0 the producer; warp 1 the dQ writer (dq_lag: warp w + 1 for
//     consumer w; two_dq_writers: warps 1 and 2 on alternate steps; SPLIT_D: none, the consumers add
//     dQ themselves); thread 96 (warp 3, idle in every configuration) releases the convert kernel.
//   warpgroups 1 and 2 (240 registers, 208 at d32): the consumers.
// head_dim_v != head_dim ((192, 128): BwdSm90Traits::head_dim_v): V, dO and dV are DV wide, Q, K, dQ,
// dK D wide; each consumer warpgroup is compiled for its role (dV or dK: their products differ in
// width; bwd_sm90_consumer.cuh, "(192, 128)").
// Padding: rows past seqlen_q arrive as zeros (TMA out-of-bounds fill) with LSE = +inf, so their P is
// 0; keys past seqlen_k and the window's edges are masked only in the blocks that cross them. Head
// dims below an instantiation's run on it: the TMA maps' innermost dimension is the call's head_dim,
// so the loads read zeros past it, and the stores of dK/dV (store_rows) and dQ (the convert kernel)
// stop there.
//
// Programmatic dependent launch (flash_bwd_sm90.cu, run; cuda/hopper/grid_dependency.cuh). This kernel
// is launched with programmatic stream serialization after the prepare kernel, which executes
// launch_dependents at its entry, so this grid's CTAs start on the SMs that prepare's last wave
// leaves, and every CTA of this grid executes launch_dependents for the convert kernel, from thread
// 96, right after its griddepcontrol.wait, so that once convert runs prepare has completed: convert's
// early path polls counters that prepare zeroed, and the scratch may hold an earlier call's counts at
// the same addresses (the stream-ordered pool reuses them), which a poll before the zeroing would take
// for complete blocks. launch_dependents counts once per CTA, on its first execution (PTX ISA,
// griddepcontrol), so no other thread may execute it. What runs before griddepcontrol.wait reads only
// the call's inputs (Q, K, V, dO, cu_seqlens) and the varlen tile list, all written by work that
// completed before prepare started: thread 0's decode_tile, the mbarrier init, the producer's map
// prefetches and every TMA load. The wait is where prepare's outputs are first touched: a consumer's
// first load of LSE·log2 e and D (SPLIT_D: also before its first add into the zeroed accumulator), the
// dQ writer's first add or semaphore poll; every other thread waits before it exits, so the grid's
// completion (what the convert kernel's wait and all later work in the stream see) implies prepare's.
#pragma once
#include <cstdint>

#include "cuda/backward/sm90/bwd_sm90_consumer.cuh"
#include "cuda/backward/sm90/bwd_sm90_dq_writer.cuh"
#include "cuda/backward/sm90/bwd_sm90_producer.cuh"
#include "cuda/backward/sm90/bwd_sm90_tile_order.cuh"
#include "cuda/backward/sm90/bwd_sm90_traits.cuh"
#include "cuda/hopper/async_copy.cuh"
#include "cuda/hopper/grid_dependency.cuh"
#include "cuda/hopper/wgmma.cuh"

namespace flashbox::sm90::bwd {

template <class Cfg>
__global__ void __launch_bounds__(Cfg::THREADS, 1) flash_bwd_sm90_kernel(const __grid_constant__ BwdSm90Params p) {
  extern __shared__ uint8_t smem_raw[];
  // Aligned up to 1024 B (the 128-B swizzle's atom) by an offset from smem_raw rather than by masking
  // its address as an integer: the pointer then stays one into shared memory for the compiler, and
  // the consumers' reads of the LSE / D vectors are LDS, not generic loads (LD, 16 per d128 step).
  uint8_t *smem = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
  uint64_t *bar = reinterpret_cast<uint64_t *>(smem + Cfg::BAR_OFF);
  uint64_t *kv_full = bar, *full = bar + 1, *empty = bar + 1 + Cfg::STAGES;
  const TileRef tile{smem_addr(smem + Cfg::TILE_OFF)};
  if (threadIdx.x == 0) {
    BwdTile t;
    const bool valid = decode_tile<Cfg>(p, int(blockIdx.x), t);
    int *dst = reinterpret_cast<int *>(smem + Cfg::TILE_OFF);
    dst[0] = t.n_block, dst[1] = t.hk, dst[2] = t.b, dst[3] = t.tb, dst[4] = t.q0, dst[5] = t.k0, dst[6] = t.sq;
    dst[7] = t.sk, dst[8] = valid;
    if constexpr (Cfg::MASKS) {
      if (valid) write_mask_walk(p, t, dst);
    }
    mbar_init(kv_full, 1);
    for (int s = 0; s < Cfg::STAGES; ++s) {
      mbar_init(full + s, 1);
      mbar_init(empty + s, 4 * Cfg::NWG);  // one arrival per consumer warp
    }
    mbar_init_fence();
  }
  __syncthreads();
  if (!tile.valid()) {  // the whole CTA: no barrier is used yet
    grid_dependency_wait();  // every thread passes it before exiting (the file header)
    return;                  // (the exit counts as this CTA's launch_dependents)
  }
  // Broadcast from lane 0 so that ptxas knows it is warp-uniform: the consumers' shared-memory
  // descriptors derive from it (their key half, dQ chunk, staging buffer), and with a plain
  // threadIdx.x / 128 each was computed in regular registers and moved to uniform ones before every
  // wgmma (R2UR 10 % and IMAD / VIADD 16 % of the d128 kernel's instructions in Nsight Compute).
  const int wg = __shfl_sync(0xffffffffu, int(threadIdx.x) / 128, 0);
  if (wg == 0) {
    setmaxnreg_dec<24>();
    if (threadIdx.x == 0) {
      bwd_producer<Cfg>(p, smem, kv_full, full, empty, tile);
    } else if (threadIdx.x == 96) {  // warp 3: no role in any configuration (the writers are warps 1, 2)
      // The convert kernel (launched programmatically after this one) may be scheduled once every CTA
      // did this: after prepare completed, so that convert, which polls the counters prepare zeroed
      // (early convert) and reads the accumulator, never sees a stale counter of an earlier call in
      // the same scratch bytes (the file header). An idle thread of
      // warpgroup 0 waits, so the producer's prologue loads still overlap prepare's tail. Its CTAs
      // only take SMs that this grid's CTAs (all dispatched by then) left.
      grid_dependency_wait();
      grid_dependents_launch();
    } else if constexpr (Cfg::TWO_WRITERS) {  // two dQ writers taking alternate steps, warps 1 and 2
      if (threadIdx.x / 32 == 1 || threadIdx.x / 32 == 2) bwd_dq_writer_pair<Cfg>(p, smem, tile, threadIdx.x / 32 - 1);
    } else if (Cfg::DQ_LAG && threadIdx.x / 32 == 1) {
      bwd_dq_writer<Cfg, 0>(p, smem, tile);
    } else if (Cfg::DQ_LAG && threadIdx.x / 32 == 2) {
      bwd_dq_writer<Cfg, 1>(p, smem, tile);
    } else if (!Cfg::SPLIT_D && threadIdx.x / 32 == 1) {
      bwd_dq_writer<Cfg>(p, smem, tile);
    }
  } else {
    setmaxnreg_inc<Cfg::CONSUMER_REGS>();
    if constexpr (Cfg::DV != Cfg::D) {  // (192, 128): each consumer compiled for its role (its gradient's width)
      if (wg == 1)
        bwd_consumer<Cfg, 0>(p, smem, kv_full, full, empty, tile, 0);
      else
        bwd_consumer<Cfg, 1>(p, smem, kv_full, full, empty, tile, 1);
    } else {
      bwd_consumer<Cfg>(p, smem, kv_full, full, empty, tile, wg - 1);
    }
  }
  // The producer thread and the idle threads of warpgroup 0 did not wait: no thread of this grid
  // exits before prepare completed, so this grid's completion implies prepare's (a no-op where the
  // thread waited already).
  grid_dependency_wait();
}

}  // namespace flashbox::sm90::bwd
