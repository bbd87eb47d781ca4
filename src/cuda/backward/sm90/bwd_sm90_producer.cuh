// The producer of the Hopper backward: one thread of warpgroup 0 (24 registers after setmaxnreg)
// issues every TMA load of its CTA (FA3: the load() of mainloop_bwd_sm90_tma_gmma_ws.hpp). K_j and V_j
// once, on kv_full; then Q_i and dO_i of every step, 128B (d96, d32: 64B) swizzled panels (K and Q
// D columns, V and dO DV), through a STAGES-deep ring of full / empty mbarriers (the consumers'
// warps arrive on empty once a step's products have read the stage). The steps are every query
// block of m_range of every query head of the kv head's group, in the walk the consumers and the dQ
// writer take too: head by head, query blocks ascending; with the ascending deterministic order,
// query blocks descending with the group's heads innermost; with a block mask the CTA's step list
// (bwd_sm90_tile_order.cuh).
// All of this reads only the call's inputs (and the varlen tile list): it runs before the grid
// dependency wait, overlapping the prepare kernel's tail (flash_bwd_sm90_kernel.cuh).
#pragma once
#include <cstdint>

#include "cuda/backward/sm90/bwd_sm90_tile_order.cuh"
#include "cuda/backward/sm90/bwd_sm90_traits.cuh"
#include "cuda/hopper/async_copy.cuh"

namespace flashbox::sm90::bwd {

template <class Cfg>
__device__ __forceinline__ void bwd_producer(const BwdSm90Params &p, uint8_t *smem, uint64_t *kv_full, uint64_t *full,
                                             uint64_t *empty, TileRef t) {
  const int n_block = t.n_block(), hk = t.hk(), b = t.tb();
  tma_prefetch_map(&p.tm_q);
  tma_prefetch_map(&p.tm_do);
  mbar_expect_tx_arrive(kv_full, Cfg::K_BYTES + Cfg::V_BYTES);
  load_tile<Cfg::KL / Cfg::PCOLS, Cfg::PCOLS>(smem + Cfg::K_OFF, Cfg::BN * Cfg::ROW, &p.tm_k, p.ord_k, kv_full, t.k0() + n_block * Cfg::BN, hk,
                         b);
  load_tile<Cfg::PANELS_V, Cfg::PCOLS>(smem + Cfg::V_OFF, Cfg::BN * Cfg::ROW, &p.tm_v, p.ord_v, kv_full, t.k0() + n_block * Cfg::BN, hk,
                         b);
  PipeState<Cfg::STAGES> st;
  const int2 mr = walk_range<Cfg>(p, t);
  const auto load_step = [&](int h, int m) {
    mbar_wait(empty + st.stage, st.phase ^ 1);
    uint64_t *bar = full + st.stage;
    mbar_expect_tx_arrive(bar, Cfg::Q_BYTES + Cfg::DO_BYTES);
    load_tile<Cfg::PANELS, Cfg::PCOLS>(smem + Cfg::Q_OFF + st.stage * Cfg::Q_BYTES, Cfg::BM * Cfg::ROW, &p.tm_q, p.ord_q, bar,
                           t.q0() + m * Cfg::BM, h, b);
    load_tile<Cfg::PANELS_V, Cfg::PCOLS>(smem + Cfg::DO_OFF + st.stage * Cfg::DO_BYTES, Cfg::BM * Cfg::ROW, &p.tm_do, p.ord_do, bar,
                           t.q0() + m * Cfg::BM, h, b);
    st.advance();
  };
  if constexpr (Cfg::MASKS) {  // a block mask: the CTA's step list (bwd_sm90_tile_order.cuh, block_list)
    if (const uint32_t *list = block_list<Cfg>(p, t)) {
      const int steps = walk_steps<Cfg>(p, mr), h_begin = hk * p.group;
      for (int i = 0; i < steps; ++i) {
        const BlockStep s = block_step(list[i], h_begin);
        load_step(s.h, s.m);
      }
      return;
    }
  }
  if constexpr (Cfg::ASCENDING) {  // the ascending order's walk: query blocks descending, the group's heads innermost
    for (int m = mr.y - 1; m >= mr.x; --m)
      for (int hi = 0; hi < p.group; ++hi) load_step(hk * p.group + hi, m);
  } else {  // head by head, query blocks ascending
    for (int hi = 0; hi < p.group; ++hi)
      for (int m = mr.x; m < mr.y; ++m) load_step(hk * p.group + hi, m);
  }
}

}  // namespace flashbox::sm90::bwd
