// Tensor-memory-accelerator copies, mbarriers, named barriers and register reallocation (sm_90a).
//
// The producer/consumer protocol (docs/hopper.md §4.1-4.2): a `full` mbarrier per stage
// completes when the producer's arrive.expect_tx and the TMA's byte count both land; an `empty`
// mbarrier per stage completes when every consumer warpgroup has released the stage. Waits test the
// phase parity; PipeState walks (stage, parity) around a ring of S stages.
#pragma once
#include <cuda.h>
#include <cstdint>

#include "cuda/hopper/tma_host.hpp"

namespace flashbox::sm90 {

__device__ __forceinline__ uint32_t smem_addr(const void *p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---- mbarrier ---------------------------------------------------------------------------------
__device__ __forceinline__ void mbar_init(uint64_t *bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
// Makes barrier initialisation visible to the async proxy and the other threads (before a CTA barrier).
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_expect_tx_arrive(uint64_t *bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t *bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
// Blocks until the phase with the given parity has completed.
__device__ __forceinline__ void mbar_wait(uint64_t *bar, uint32_t parity) {
  const uint32_t addr = smem_addr(bar);
  uint32_t done;
  do {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(addr), "r"(parity)
                 : "memory");
  } while (!done);
}

// Position in a ring of STAGES buffers: the stage to use and the parity its `full` barrier completes.
template <int STAGES>
struct PipeState {
  int stage = 0;
  uint32_t phase = 0;
  __device__ __forceinline__ void advance() {
    if (++stage == STAGES) stage = 0, phase ^= 1;
  }
};

// ---- TMA --------------------------------------------------------------------------------------
__device__ __forceinline__ void tma_prefetch_map(const CUtensorMap *map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}
// Loads one box of a 4-D tensor map at coordinates {c0, c1, c2, c3} into shared memory; completion
// is reported to `bar` as transferred bytes.
__device__ __forceinline__ void tma_load_4d(void *dst, const CUtensorMap *map, uint64_t *bar, int c0, int c1, int c2,
                                            int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], "
      "[%2];\n" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}
// The coordinates {d, and seq/head/batch in the map's order} of a box (tma_host.hpp's encode_map).
__device__ __forceinline__ int4 tma_coords(TmaOrder o, int d, int seq, int head, int batch) {
  const auto pick = [&](int slot) { return o.seq == slot ? seq : (o.head == slot ? head : batch); };
  return make_int4(d, pick(1), pick(2), pick(3));
}

// Loads a rows x D tile (D/64 panels of rows x 128 B, one box each) whose first row is `seq`; with
// COLS = 32, D/32 panels of rows x 64 B (the map's boxes are 32 columns, 64B swizzle).
template <int PANELS, int COLS = 64>
__device__ __forceinline__ void load_tile(uint8_t *dst, int panel_bytes, const CUtensorMap *map, TmaOrder ord,
                                          uint64_t *bar, int seq, int head, int batch) {
#pragma unroll
  for (int pnl = 0; pnl < PANELS; ++pnl) {
    const int4 c = tma_coords(ord, pnl * COLS, seq, head, batch);
    tma_load_4d(dst + pnl * panel_bytes, map, bar, c.x, c.y, c.z, c.w);
  }
}

// Stores one box from shared memory; rows outside the tensor are clipped by the hardware.
__device__ __forceinline__ void tma_store_4d(const CUtensorMap *map, const void *src, int c0, int c1, int c2, int c3) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(smem_addr(src)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
}
__device__ __forceinline__ void tma_store_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// This thread's committed stores have read their shared-memory source (it may be overwritten).
__device__ __forceinline__ void tma_store_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}
// Generic-proxy shared-memory writes become visible to the async proxy (TMA, wgmma).
__device__ __forceinline__ void fence_view_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// ---- named barriers and register reallocation ---------------------------------------------------
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
template <int REGS>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(REGS));
}
template <int REGS>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(REGS));
}

// Stores four 8x8 16-bit matrices from registers; lane l gives the address of row l%8 of matrix l/8.
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}

}  // namespace flashbox::sm90
