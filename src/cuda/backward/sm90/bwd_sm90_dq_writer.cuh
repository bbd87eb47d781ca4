// The dQ writer of the Hopper backward (FA3: the dQ part of epilogue_bwd.hpp / its dQ-writer warp):
// warp 1 of warpgroup 0 (with dq_lag warps 1 and 2, one per consumer; with two_dq_writers warps 1
// and 2 taking alternate steps). Per step and consumer it waits for the consumer's staged 64 x 64
// fp32 dQ chunk (named barrier kDqFull + w), adds it into the global accumulator with one bulk
// reduce-add (cp.reduce.async.bulk), and gives the staging buffer back (kDqEmpty + w) once the copy
// engine has read it: the consumers never wait for the add itself.
// Why staging and a writer rather than adds from the consumers' registers (red.global.add.v4.f32 in
// the same order, as the SPLIT_D configurations do), although staging costs 64 KB of the ~368 KB of
// shared-memory traffic per d128 step, a proxy fence and two barriers: the register adds measured
// 2-6 % slower at d64 and 2-3 % at d128 causal.
// Deterministic mode (bwd_sm90_tile_order.cuh): before its add, the writer polls the chunk's semaphore
// until it holds the CTA's rank, and after the add completed it releases the semaphore to the next key
// block. Early convert (dq_done, non-deterministic fixed length): after a step's adds completed it
// counts them on the block's counter, and the convert kernel converts the block once the count is
// full (flash_bwd_sm90.cu, convert_dq_early_kernel).
#pragma once
#include <cstdint>

#include "cuda/backward/sm90/bulk_ops.cuh"
#include "cuda/backward/sm90/bwd_sm90_tile_order.cuh"
#include "cuda/backward/sm90/bwd_sm90_traits.cuh"
#include "cuda/hopper/async_copy.cuh"
#include "cuda/hopper/grid_dependency.cuh"

namespace flashbox::sm90::bwd {

__device__ __forceinline__ int ld_acquire_gpu(const int *ptr) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(ptr) : "memory");
  return v;
}
__device__ __forceinline__ void red_release_gpu_add(int *ptr, int v) {
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;\n" ::"l"(ptr), "r"(v) : "memory");
}
// Orders the bulk (async proxy) accesses to global memory with this thread's ordinary ones.
__device__ __forceinline__ void fence_proxy_async_global() { asm volatile("fence.proxy.async.global;\n" ::: "memory"); }

// One step of a dQ writer, the part both writers share (bwd_dq_writer, bwd_dq_writer_pair; the warp
// converged at entry, lane 0 issues), for consumers W0..W1 - 1: wait for each consumer's staged chunk
// (named barrier full + w); in deterministic mode (det) poll the chunk's semaphore until it holds this
// CTA's rank; add the chunk into the global accumulator with one bulk reduce-add. Once the copy engine
// has read them, give the staging buffers back on empty + w (for the next step: not after the last),
// and in deterministic mode wait for the adds to complete and release the semaphores to the next key
// block. The callers keep what differs (which steps and barrier ids they take, the early convert's
// count) and converge the warp after it. Step and steps are passed rather than "is there a next
// step" so that the comparison comes after the __syncwarp (compared at the call, the PTX had it
// above the warp sync).
template <class Cfg, int W0, int W1>
__device__ __forceinline__ void dq_writer_step(const BwdSm90Params &p, const uint8_t *smem, int lane, int64_t row,
                                               int *sem, int rank, bool det, int full, int empty, int step, int steps) {
#pragma unroll
  for (int w = W0; w < W1; ++w) {
    named_barrier_sync(full + w, kDqBarrierThreads);
    if (lane == 0) {
      if (det) {
        // A legitimate wait is microseconds; a wrong count would hang the device: give up after
        // ~2^24 polls (seconds; the gradients are then wrong and the tests say so).
        for (int polls = 0; ld_acquire_gpu(sem + w) != rank && polls < (1 << 24); ++polls) {}
        fence_proxy_async_global();
      }
      bulk_reduce_add_f32(p.dq_accum + row * Cfg::DQ_LD + w * Cfg::DQ_CHUNK_FLOATS,
                          smem + Cfg::DQ_OFF + w * Cfg::DQ_CHUNK_FLOATS * 4, Cfg::DQ_CHUNK_FLOATS * 4);
    }
    __syncwarp();  // bar.sync is .aligned: the whole warp, converged, at the next one
  }
  if (lane == 0) bulk_wait_read_all();
  __syncwarp();
  if (step + 1 < steps)
#pragma unroll
    for (int w = W0; w < W1; ++w) named_barrier_arrive(empty + w, kDqBarrierThreads);
  if (det && lane == 0) {  // the adds completed: the next key block may add
    bulk_wait_all();
    fence_proxy_async_global();
#pragma unroll
    for (int w = W0; w < W1; ++w) red_release_gpu_add(sem + w, 1);
  }
}

// The dQ writer (one warp; lane 0 issues): the consumers' staged chunks into the global accumulator,
// step by step in the consumers' order (every query block of every query head of the group, head by
// head; with a block mask the CTA's step list). W < 0: one warp for both consumers' chunks; W = w
// (dq_lag): a warp for consumer w's alone, so that neither consumer's staging waits for the other's
// chunk to be read (the consumers run up to a step apart there). The two_dq_writers kernels have two
// writers taking alternate steps (bwd_dq_writer_pair).
template <class Cfg, int W = -1>
__device__ __forceinline__ void bwd_dq_writer(const BwdSm90Params &p, uint8_t *smem, TileRef t) {
  static_assert(!Cfg::TWO_WRITERS, "two_dq_writers: bwd_dq_writer_pair");
  constexpr int NWG = Cfg::NWG, BM = Cfg::BM, W0 = W < 0 ? 0 : W, W1 = W < 0 ? NWG : W + 1;
  const int lane = threadIdx.x % 32, n_block = t.n_block(), hk = t.hk();
  const int2 mr = walk_range<Cfg>(p, t);
  const int m_begin = mr.x, m_end = mr.y;
  const int steps = walk_steps<Cfg>(p, mr);
  // A block mask's steps (null: the range, head by head).
  [[maybe_unused]] const uint32_t *list = block_list<Cfg>(p, t);
  const bool det = p.dq_sem != nullptr;
  // The accumulator and the semaphores are prepare's (zeroed there): none of its adds, polls or
  // signals before prepare completed (programmatic launch, the kernel's entry).
  grid_dependency_wait();
  if (steps > 0)
#pragma unroll
    for (int w = W0; w < W1; ++w) named_barrier_arrive(kDqEmpty + w, kDqBarrierThreads);
  const int h_begin = hk * p.group;
  int h = h_begin, m = m_begin;
  for (int step = 0; step < steps; ++step) {
    if constexpr (Cfg::MASKS) {
      if (list != nullptr) {
        const BlockStep s = block_step(list[step], h_begin);
        h = s.h, m = s.m;
      }
    }
    const int64_t row = accum_row(p, t, h, m, BM);
    int *sem = det ? p.dq_sem + (p.sem_rows == 1 ? row : row / BM) * NWG : nullptr;  // no 64-bit division
    const int rank = det ? last_n_block(p, m, BM, Cfg::BN, t.sq(), t.sk()) - n_block : 0;
    dq_writer_step<Cfg, W0, W1>(p, smem, lane, row, sem, rank, det, kDqFull, kDqEmpty, step, steps);
    // Early convert (p.dq_done, non-deterministic only; flash_bwd_sm90.cu, convert_dq_early_kernel):
    // once this warp's adds of the step completed, a release add of their count (NWG chunks, or with
    // dq_lag 1 per writer warp) to the block's counter, which is complete at NWG per adding key block;
    // as dq_writer_step's deterministic signal (async-proxy writes, completion wait, proxy fence,
    // generic release). The wait comes right after the adds were read, when the consumers have just started
    // the next step: it ends long before they stage that step's chunks (a step is 3-5 us at T1024, a
    // 32 KB reduce-add's completion an estimated ~1 us), so it stays off their path, and no block's
    // count is held back by a step (waiting a step later, for step i - 1's groups, would delay every
    // count by one).
    if (p.dq_done != nullptr && lane == 0) {
      bulk_wait_all();
      fence_proxy_async_global();
      red_release_gpu_add(p.dq_done + int(row / BM), W1 - W0);  // fixed length: (b * heads_q + h) * num_m_blocks + m
    }
    __syncwarp();
    if (++m == m_end) m = m_begin, ++h;
  }
  if (lane == 0) bulk_wait_all();
  __syncwarp();
}

// The two_dq_writers kernels' dQ writers (lane 0 of each issues): warps 1 and 2 of the producer
// warpgroup, writer wi taking the steps s with s % 2 == wi. One writer (bwd_dq_writer) waits
// for each step's adds to complete before it releases their semaphores, and only then goes on to the
// next step: per CTA a serial chain of completion latencies (the bulk add's issue to completion, the
// release, the next CTA's poll), which at D128 is about a step long. With two, step s + 1's adds are
// issued while step s's completion is awaited. The order of the adds into each dQ chunk is unchanged:
// it is the semaphores' (one per (query head, query block, consumer)), and a CTA's walk visits each
// (head, block) once, so the two writers never touch the same semaphore or chunk. What is handed
// between them: consumer w's one staging buffer, step by step: step s's chunk is staged under the
// barriers of s's parity (kDqFull + w, kDqEmpty + w, or kDqOdd further for odd s) and the writer of
// step s, having seen it read, frees the buffer for step s + 1 on step s + 1's parity. A barrier id is
// thus waited on (bar.sync) by one writer only, and one id's instances cannot mix steps: the
// consumer arrives on step s + 2's kDqFull only after the buffer was freed for s + 1, i.e. after
// step s's writer passed its kDqFull (with one id for both writers, the other writer's sync for s + 1
// could complete with three of the consumer's warps for s: bench/sm90_bwd_det_writers_model.py, the
// protocol under random interleavings, finds that). Writer 0 frees step 0's buffers. No new wait
// between CTAs: each add still waits only for the CTAs before it in the add order (the file header).
template <class Cfg>
__device__ __forceinline__ void bwd_dq_writer_pair(const BwdSm90Params &p, uint8_t *smem, TileRef t, int wi) {
  // The descending order and walk (head by head, query blocks ascending; rank = last_n_block(m) - n),
  // fixed length or varlen; or the ascending order's (fixed length).
  static_assert(Cfg::TWO_WRITERS && !Cfg::DQ_LAG, "the two_dq_writers kernels only (always deterministic)");
  constexpr int NWG = Cfg::NWG, BM = Cfg::BM;
  const int lane = threadIdx.x % 32, n_block = t.n_block(), hk = t.hk();
  const int2 mr = walk_range<Cfg>(p, t);
  const int steps = p.group * (mr.y - mr.x);
  // The accumulator and the semaphores are prepare's (zeroed there): none of the adds, polls or
  // signals before prepare completed (programmatic launch, as bwd_dq_writer).
  grid_dependency_wait();
  if (wi == 0 && steps > 0)
#pragma unroll
    for (int w = 0; w < NWG; ++w) named_barrier_arrive(kDqEmpty + w, kDqBarrierThreads);
  const int h_begin = hk * p.group;
  const int full = kDqFull + kDqOdd * wi, empty_next = kDqEmpty + kDqOdd * (1 - wi);
  // The ascending order's walk (query blocks descending, the group's heads innermost) or the
  // descending order's, advanced by steps, not divided out: the producer warpgroup has 24 registers.
  int h = h_begin, m = Cfg::ASCENDING ? mr.y - 1 : mr.x;
  const auto advance = [&]() {
    if constexpr (Cfg::ASCENDING) {
      if (++h == h_begin + p.group) h = h_begin, --m;
    } else if (++m == mr.y) {
      m = mr.x, ++h;
    }
  };
  if (wi == 1) advance();
  for (int step = wi; step < steps; step += 2, advance(), advance()) {
    const int64_t row = accum_row(p, t, h, m, BM);
    int *sem = p.dq_sem + (p.sem_rows == 1 ? row : row / BM) * NWG;
    const int rank = Cfg::ASCENDING ? n_block - first_n_block(p, m, BM, Cfg::BN, t.sq(), t.sk())
                                : last_n_block(p, m, BM, Cfg::BN, t.sq(), t.sk()) - n_block;
    // Its completion wait is this writer's alone: the other writer issues the next step's adds meanwhile.
    dq_writer_step<Cfg, 0, NWG>(p, smem, lane, row, sem, rank, true, full, empty_next, step, steps);
    __syncwarp();
  }
}

}  // namespace flashbox::sm90::bwd
