// The consumers of the Hopper backward (FA3 paper App. B.1 Algorithm 3; FA3's mma() of
// mainloop_bwd_sm90_tma_gmma_ws.hpp; docs/hopper.md §2.2): warpgroups 1 and 2, 64 keys each of the
// CTA's BN = 128 (SPLIT_D: the CTA's 64 keys, 32 queries each). K_j and V_j stay in shared memory
// and dK_j, dV_j accumulate in registers over every query block i of every query head of the GQA
// group. With the keys as the M side of every product, the scores come out transposed and P^T, dS^T
// sit in registers already as A fragments:
//   S^T  = K_w Q_i^T     (SS)         P^T  = exp2(S^T · scale·log2 e − LSE·log2 e)  [masked: 0]
//   dP^T = V_w dO_i^T    (SS)         dS^T = P^T ∘ (dP^T − D)
//   dV_w += P^T dO_i     (RS, dO N-major)
//   dK_w += dS^T Q_i     (RS, Q N-major; × scale at the end)
// dS^T also goes to shared memory (double-buffered, MN-major 128B-swizzled panels of 64 queries)
// and, once both consumers wrote theirs, each computes one 64 x 64 chunk of
//   dQ_i += dS K_j       (SS, both operands MN-major)
// which it stages in shared memory for the dQ writer (fragment order: each thread's registers are
// contiguous, so the stores are free of bank conflicts; the convert kernel knows the order).
// Overlap inside a consumer: P is computed while dP^T is in flight, and the dQ chunk is staged while
// dK's product runs (issue order S^T, dP^T, dV, dQ, dK). LSE·log2 e and D of each step are loaded
// into registers a step ahead and copied into the warpgroup's shared copy at the step's start.
//
// dQ one step late (dq_lag; the d128 kernels: 1.5-2.4 % faster at T >= 8192; at d64 4-7 % slower, so
// d64 keeps the plain schedule). In the plain schedule a consumer's dQ chunk of step i needs both
// halves of dS^T_i, so both consumers meet at kDsBarrier every step and run in lockstep: their
// softmax phases coincide, and whichever is late stalls the other. With dq_lag consumer w issues step
// i's dQ product during step i + 1 (between dV_{i+1} and dK_{i+1}, where the plain schedule has dQ_i:
// the same registers live), reading dS^T buffer i mod 2, whose partner half is written a whole step
// before it is read. The barrier becomes two one-way handshakes per buffer b, named barriers of 256 (128
// arrive, 128 sync):
//   kDsFull + 2w + b: w has written its half of buffer b (arrive after the stores and the proxy
//     fence); the partner syncs before its dQ product of that step.
//   kDsEmpty + 2w + b: w's dQ product of buffer b completed (arrive after the wgmma wait); the partner
//     syncs before it overwrites its half of b two steps later (beside the chunk barrier: just before
//     the stores it made ptxas spill at d64).
// A named barrier counts arrivals without phases, so no consumer may arrive twice on one before the
// partner synced the first: w's next arrival on kDsFull + 2w + b (step i + 2) comes after its sync on
// the partner's kDsEmpty of b, which the partner arrives after its own kDsFull sync of step i; the
// same argument the other way round for kDsEmpty. Every step syncs both unconditionally (a barrier or
// a product under a branch between the products makes ptxas serialize them and spill, C7512), so the
// arrivals of step -1 (kDsFull of buffer 1, kDsEmpty of buffer 0) are made before the loop, step 0's
// dQ product reads the K tile (read-only: no race) and is dropped, and after the loop each consumer
// issues the last step's chunk and syncs the partner's last kDsEmpty arrival. The dQ writer is then
// one warp per consumer (one warp taking both chunks of a step in order would couple the consumers
// again through the staging buffers). The consumers run up to about a step apart (the Q/dO ring and
// the handshakes bound it); deadlock-free because every wait is for an event of an earlier step of
// the partner, or of the writer for an earlier chunk.
//
// Masks and score transforms (cuda/common/score_mods.cuh; causal is the window (-1, 0), bottom-right
// aligned), all run-time fields of the one configuration per head_dim:
//   window: a CTA walks only the query blocks holding a row that sees one of its keys (m_range, both
//     ends), and masks elements only in a block that is not inside every row's window.
//   softcap, ALiBi (`transforms`): the score is recomputed as the forward made it, in the forward's
//     units, t = tanh.approx(s · scale / cap) (the sm90 forward's tanh, so P matches its LSE) and
//     x = cap · t − slope · |i + shift − j|, P = exp2(x · log2 e − LSE · log2 e); the gradient through
//     the cap multiplies dS by 1 − t² (dK, dQ keep their · scale at the end). Three shapes, each a
//     uniform run-time branch beside the plain path's:
//       ALiBi alone (OVERLAP_ALIBI: d64, d128): nothing multiplies dS, so the plain path's overlap
//         with the bias in P's exponent (P while dP^T's product runs).
//       softcap (OVERLAP_CAP: d128): t and P while dP^T's product runs; across the wait only
//         u = 1 − t², two per register as f16x2 (16 registers); then dS = P ∘ (dP − D) ∘ u.
//       otherwise (softcap at d64, where u's 32 registers spilled 116 B; every transform at d32, d96,
//         d192, d256): P and dS in one fused pass after both products completed.
//     Measured (B4 bf16, T 4096 and 16384, of the plain rate): ALiBi 0.94-0.98 (d128), 0.93-0.96 (d64),
//     where the fused pass gave 0.85-0.87 / 0.75; softcap 30 at d128 0.88-0.92 (fused 0.88-0.90; the
//     rest is tanh's MUFU op beside exp2's), at d64 0.82-0.84.
//
// Mask families (BwdSm90Traits::masks: document ids, prefix-LM lengths, block masks, mask mods; bf16 d128 with dq_lag,
// fixed length, no softcap or ALiBi, not deterministic; cuda/common/mask_ext.cuh has the rules). A
// CTA walks the query blocks of the pre-pass's range (flash_bwd_sm90_mask_walks.cu, mask_walk_kernel: the
// window's m_range, all blocks where the key block starts inside the prefix, narrowed to the rows
// whose document ids lie within the key block's), read into the tile (walk_range). A step is masked
// element by element where the window or the edges cut it (as above), where it crosses the
// prefix's end, or with documents unless every row and key of it holds one id (the step's query
// block's id range, read while the products run, against the keys'); the element rule then reads
// the thread's two keys' and sixteen rows' ids. Keys wholly inside the prefix ignore the window.
// With a block mask the steps are the CTA's list (bwd_sm90_tile_order.cuh, block_list: per query
// head of the group the query blocks whose mask rows name this key block, partial then full), each
// entry read a step ahead of its LSE / D loads; a full step admits every element, so it is masked
// only where the edges cut it and reads no ids; a partial step is masked as above. With a mask mod
// (its bit tiles: cuda/common/mask_ext.cuh) every partial step is element-masked and also ANDs the
// mod's bit: the pre-pass wrote the step's tile pointer beside its list entry (BwdSm90Params::
// mod_steps), and each thread reads one word per row for its two keys, as it reads the rows' ids.
//
// Head dimensions 192 and 256 (SPLIT_D). At D = 256 the layout above would hold dV_w and dK_w, 64 x
// 256 fp32 each, in 128 + 128 registers per thread: more than the 240 a consumer gets. So the columns
// of the accumulators and the queries of the scores are divided instead of the keys (FA3's idea of
// exchanging P and dS between the warpgroups through shared memory, here by queries):
//   BN = 64 keys per CTA, BM = 64 queries per step. Consumer w computes S^T and dP^T for the 64 keys
//   and its 32 queries [32 w, 32 w + 32) (SS, N = 32, over all D columns), P^T and dS^T from them,
//   and stores both into shared memory (P^T and dS^T tiles, 64 keys x 64 queries, 128-B swizzled
//   rows, double-buffered). Once both halves are there (kDsBarrier), at 256 consumer w accumulates
//   columns [128 w, 128 w + 128) of dK_j, dV_j for all 64 keys and 64 queries:
//     dV_j[:, w] += P^T dO_i[:, w]   dK_j[:, w] += dS^T Q_i[:, w]   (SS: A K-major from those tiles,
//                                                                  B N-major, Q/dO panels 2w, 2w+1)
//     dQ_i[:, w] += dS K_j[:, w]     (two 64 x 64 SS chunks, 2w and 2w + 1, one after the other)
//   At 192 (ONE_GRAD) consumer 0 accumulates all of dV_j and consumer 1 all of dK_j (one
//   m64n192k16 SS product per k-step; 96 columns each of both would start consumer 1's B operand in
//   the middle of a 128-B swizzle panel, which no wgmma descriptor names); dQ_i's three chunks go one
//   to consumer 0, two to consumer 1. The one barrier per step bounds how far the lighter consumer
//   runs ahead.
//   Shared memory at 256: K 32 KB + V 32 KB + Q, dO rings 2 x 2 x 32 KB + dS^T and P^T 2 x 2 x 8 KB
//   = 224 KB + vectors, barriers, alignment: 226 of 227 KB; at 192 the rows are 3/4 as long and pay
//   for a third ring stage. The dQ staging does not fit, so each consumer adds its chunks from
//   registers (red.global.add.v4.f32, in the staging's fragment order: 512 contiguous bytes per warp
//   and instruction); no dQ writer warp, and no deterministic mode (the plan gives deterministic
//   calls above head_dim 128 to the sm80 family). Registers per consumer thread: at 256 dV 64 + dK 64
//   + S^T 16 + dP^T 16 + their packed halves 8 + 8 + one dQ chunk 32; at 192 the gradient 96 + the
//   same 80 (ptxas: 0 spills).
//
// (192, 128): head_dim_v != head_dim (DeepSeek's prefill; BwdSm90Traits::head_dim_v, DV = 128 on the
//   ONE_GRAD layout). V, dO and dV are DV wide, Q, K, dQ and dK D: dP^T = V dO^T contracts over DV
//   (8 k-steps instead of 12), dV = P^T dO is an m64n128 product per k-step, and prepare's D is
//   rowsum(dO ∘ O) over DV. The two consumers' products then differ in width, so each is compiled for
//   its role (the ROLE template parameter; a run-time choice between wgmma shapes would put products
//   under a branch, which ptxas serialises): consumer 0 accumulates dV (64 registers) and adds dQ chunks
//   0 and 1, consumer 1 dK (96) and chunk 2. Per step consumer 0 issues S^T (64x32x192), dP^T
//   (64x32x128), dV (64x128x64) and two dQ chunks (64x64x64 each), consumer 1 the same scores, dK
//   (64x192x64) and one chunk: 1.70 M multiply-adds each (the 192 / 192 kernel's one and two chunks
//   would leave consumer 0 with 1.44 M against 1.97 M). Shared memory: K 24 KB + V 16 KB + three ring stages of
//   Q 24 KB and dO 16 KB (120 KB) + dS^T and P^T 32 KB + vectors, barriers, alignment: 194 of 227 KB
//   (a fourth stage would need 234 KB). Registers per consumer thread: at most dK 96 + 80 as at 192
//   (ptxas: 168 per thread at launch, 0 spills; setmaxnreg gives the consumers 240).
//
// Head dimensions 96 and 32: every tile in 32-column panels of 64-byte rows, 64B swizzle (layout type
// 2, SBO eight 64-byte rows; K-major k-steps of 16 columns are 32 bytes into a row, two per panel);
// the TMA boxes are 32 columns wide. d96 (BM = 64): dV and dK are one N = 96 product per k-step; dQ_i
// is two 64 x 64 chunks as at d128 over K's four panels (KL = 128, the fourth wholly past head_dim:
// zeros), both consumers issuing the same N = 64 product (a 64 + 32 split makes ptxas inject
// warpgroup.arrive around the products, C7519). d32 (BM = BN = 128): S^T and dP^T are 2 k-steps, dV and
// dK m64n32 products from registers, dQ_i the d64 layout (columns 32..63 zeros). The step is bound near
// max(tensor 1536, MUFU 1024) clk against the padded d64 step's 2560; BM = 256 would put S^T and dP^T
// at 128 floats each per thread, BN = 192 would need a third consumer warpgroup.
#pragma once
#include <climits>
#include <cstdint>

#include "cuda/backward/sm90/bulk_ops.cuh"
#include "cuda/backward/sm90/bwd_sm90_epilogue.cuh"
#include "cuda/backward/sm90/bwd_sm90_tile_order.cuh"
#include "cuda/backward/sm90/bwd_sm90_traits.cuh"
#include "cuda/common/mask_ext.cuh"
#include "cuda/common/score_mods.cuh"
#include "cuda/hopper/async_copy.cuh"
#include "cuda/hopper/grid_dependency.cuh"
#include "cuda/hopper/online_softmax.cuh"
#include "cuda/hopper/wgmma.cuh"

namespace flashbox::sm90::bwd {

// ROLE: -1, the warpgroup (wg_arg) a run-time value; 0 or 1, a consumer specialised for its role
// (DV != D: the two roles' gradient products and accumulators differ in width; header, "(192, 128)").
template <class Cfg, int ROLE = -1>
__device__ __forceinline__ void bwd_consumer(const BwdSm90Params &p, uint8_t *smem, uint64_t *kv_full, uint64_t *full,
                                             uint64_t *empty, TileRef t_, int wg_arg) {
  constexpr bool DVW = Cfg::DV != Cfg::D;  // V, dO, dV narrower than Q, K (ONE_GRAD only)
  static_assert(!DVW || ROLE >= 0, "DV != D: the consumers are specialised by role");
  const int wg = ROLE >= 0 ? ROLE : wg_arg;
  using T = typename Cfg::Elem;
  const int n_block = t_.n_block(), hk = t_.hk();
  constexpr int BM = Cfg::BM, BN = Cfg::BN, D = Cfg::D;
  const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32, g = lane / 4, q = lane % 4;
  const uint32_t base = smem_addr(smem);
  // Descriptors (docs/hopper.md §2.5): K-major tiles step 32 B per k16 inside a 128-B row
  // and a panel per 4 steps; N/M-major tiles step 16 rows (2048 B) per k16.
  // This warpgroup's keys (rows of the K/V tiles): its own 64, or with SPLIT_D the block's 64 (its
  // 32 queries of them: q_base) and its columns of dK/dV: all, or at 256 panels 2 wg, 2 wg + 1
  // of the N-major Q/dO operands (at 192, ONE_GRAD: all columns of one gradient).
  constexpr int COLS = Cfg::COLS;
  constexpr bool ONE_GRAD = Cfg::ONE_GRAD, LAG = Cfg::DQ_LAG;
  const int key_row0 = Cfg::SPLIT_D ? 0 : wg * 64, col0 = Cfg::SPLIT_D && !ONE_GRAD ? wg * COLS : 0;
  // D = 96: every tile in 64-byte rows (ROW), SBO eight of them, layout type 2 (64B swizzle).
  constexpr int ROW = Cfg::ROW, KPP = Cfg::KPP;
  constexpr uint32_t SBO = 8 * ROW, LAYOUT = Cfg::LAYOUT;
  const uint32_t col_off = uint32_t(col0 / 64) * BM * 128;
  const uint64_t k_a = make_smem_desc(base + Cfg::K_OFF + key_row0 * ROW, 16, SBO, LAYOUT);
  const uint64_t v_a = make_smem_desc(base + Cfg::V_OFF + key_row0 * ROW, 16, SBO, LAYOUT);
  // SPLIT_D: this consumer's queries of S^T, dP^T are rows q_base.. of the K-major Q/dO tiles
  // (32 rows = 4096 B, a whole number of 8-row swizzle atoms).
  constexpr int QW = Cfg::QW;
  const int q_base = Cfg::SPLIT_D ? wg * QW : 0;
  const uint64_t q_b0 = make_smem_desc(base + Cfg::Q_OFF + q_base * 128, 16, SBO, LAYOUT);
  const uint64_t do_b0 = make_smem_desc(base + Cfg::DO_OFF + q_base * 128, 16, SBO, LAYOUT);
  // SPLIT_D: P^T and dS^T tiles as K-major A operands (keys x queries, 128-B swizzled rows).
  const uint64_t pt_a = make_smem_desc(base + Cfg::PT_OFF, 16, 1024);
  const uint64_t dst_a = make_smem_desc(base + Cfg::DS_OFF, 16, 1024);
  const uint64_t q_mn0 = make_smem_desc(base + Cfg::Q_OFF + col_off, BM * ROW, SBO, LAYOUT);
  const uint64_t do_mn0 = make_smem_desc(base + Cfg::DO_OFF + col_off, BM * ROW, SBO, LAYOUT);
  // ONE_GRAD: the gradient this consumer accumulates, as A (keys x queries tile) and B (N-major, all
  // 192 columns): dV += P^T dO for consumer 0, dK += dS^T Q for consumer 1 (the same product shape).
  [[maybe_unused]] const uint64_t grad_a = wg == 0 ? pt_a : dst_a, grad_b = wg == 0 ? do_mn0 : q_mn0;
  // The (first) dQ chunk of this consumer; at 256: chunks 2 wg and 2 wg + 1 (query panel 0); at 192:
  // chunk 0 (consumer 0), chunks 1 and 2 (consumer 1).
  // DV != D (192, 128): consumer 0 (dV, 128 columns) takes chunks 0 and 1, consumer 1 (dK) chunk 2,
  // which evens their tensor work per step (header, "(192, 128)").
  const int dq_chunk0 = DVW ? 2 * wg : ONE_GRAD ? (wg == 0 ? 0 : 1) : Cfg::SPLIT_D ? 2 * wg : wg;
  const int dq_chunks = DVW ? 2 - wg : ONE_GRAD ? 1 + wg : 2;  // SPLIT_D: chunks added from registers per step
  const int q_panel = dq_chunk0 / Cfg::ND, d_panel = dq_chunk0 % Cfg::ND;
  const uint64_t ds_a0 = make_smem_desc(base + Cfg::DS_OFF + q_panel * BN * 128, BN * 128, 1024);
  // K's columns 64 d_panel..: panel 64 d_panel / PCOLS of its PCOLS-column panels.
  const uint64_t k_mn =
      make_smem_desc(base + Cfg::K_OFF + (64 / Cfg::PCOLS) * d_panel * BN * ROW, BN * ROW, SBO, LAYOUT);

  const int key_base = n_block * BN + key_row0;
  const int key0 = key_base + warp * 16 + g;  // this thread's two keys: key0, key0 + 8

  // ONE_GRAD: dv holds consumer 0's dV or consumer 1's dK (grad_a, grad_b), and dk is unused. DV != D:
  // consumer 0's dV is DV columns (ACC), consumer 1's dK D.
  constexpr int ACC = DVW && ROLE == 0 ? Cfg::DV : COLS;
  float dv[ACC / 2], dk[ONE_GRAD ? 1 : COLS / 2];
#pragma unroll
  for (int i = 0; i < ACC / 2; ++i) dv[i] = 0.f;
#pragma unroll
  for (int i = 0; i < int(sizeof dk / sizeof dk[0]); ++i) dk[i] = 0.f;

  mbar_wait(kv_full, 0);
  PipeState<Cfg::STAGES> st;
  int ds_buf = 0;
  // Steps: every query block of m_range of every query head of the group, head by head (ascending order:
  // query blocks descending, the group's heads innermost).
  const int2 mr = walk_range<Cfg>(p, t_);
  const int m_begin = mr.x, m_end = mr.y;
  const int steps = walk_steps<Cfg>(p, mr);
  // A block mask's steps (bwd_sm90_tile_order.cuh, block_list; null: the range above, head by head).
  [[maybe_unused]] const uint32_t *list = block_list<Cfg>(p, t_);
  // Visibility of (row, key) as d = key - row - shift in [dlo, dhi] (the window; unbounded sides open).
  const int dlo = p.mods.window_left < 0 ? INT_MIN : -p.mods.window_left;
  const int dhi = p.mods.window_right < 0 ? INT_MAX : p.mods.window_right;
  // LSE·log2 e and D of a step, [2][BM] floats, are copied into the warpgroup's shared copy at the
  // start of the step, from registers each thread filled one step ahead (the global latency never
  // waits). The copy's previous reads all happened before the warpgroup's last chunk barrier.
  constexpr int VEC_PER_THREAD = 2 * BM / 128;
  float *vec = reinterpret_cast<float *>(smem + Cfg::VEC_OFF + wg * Cfg::VEC_BYTES);
  const auto load_vec = [&](float(&dst)[VEC_PER_THREAD], int h, int m) {
    const int64_t row = block_row(p, t_, h, m, BM);
#pragma unroll
    for (int j = 0; j < VEC_PER_THREAD; ++j) {
      const int x = t + 128 * j;
      dst[j] = x < BM ? p.lse_log2[row + x] : p.dsum[row + x - BM];
    }
  };
  // The chunk goes to the dQ writer through the staging buffer, once the writer has given it back.
  // odd: with two dQ writers, an odd step (its barriers are kDqOdd further, bwd_dq_writer_pair).
  // The stores take the buffer's 32-bit shared-window address (st.shared.v4): a float4 pointer into
  // `smem` makes ptxas emit generic ST.E.128 stores, which the proxy fence after them waits on (5 % of
  // the consumers' stall samples at D128 T8192).
  const auto stage_dq = [&](const float(&dq)[32], int odd) {
    const uint32_t staging = base + Cfg::DQ_OFF + (wg * Cfg::DQ_CHUNK_FLOATS + t * 4) * 4;
    const int dq_bar = wg + (Cfg::TWO_WRITERS ? kDqOdd * odd : 0);
    named_barrier_sync(kDqEmpty + dq_bar, kDqBarrierThreads);
#pragma unroll
    for (int j = 0; j < 8; ++j)
      asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(staging + j * 128 * 16), "f"(dq[4 * j]),
                   "f"(dq[4 * j + 1]), "f"(dq[4 * j + 2]), "f"(dq[4 * j + 3])
                   : "memory");
    fence_view_async_shared();
    named_barrier_arrive(kDqFull + dq_bar, kDqBarrierThreads);
  };
  float vec_next[VEC_PER_THREAD];
  const int h_begin = hk * p.group;
  int h = h_begin, m = Cfg::ASCENDING ? m_end - 1 : m_begin;
  // Block masks: whether the step's mask block is full (no element rule but the sequence's edges),
  // and the list's entry of step + 1, loaded a step ahead so that the LSE / D loads of step + 1,
  // which need its head and block, do not wait for the list's load.
  [[maybe_unused]] int full_block = 0;
  [[maybe_unused]] uint32_t ahead = 0;
  if constexpr (Cfg::MASKS) {
    if (list != nullptr && steps > 0) {
      const BlockStep s0 = block_step(list[0], h_begin);
      h = s0.h, m = s0.m, full_block = s0.full;
      if (steps > 1) ahead = list[1];
    }
  }
  // LSE·log2 e and D are prepare's outputs (and with SPLIT_D the adds go into its zeroed accumulator):
  // everything before this (K/V and the first Q/dO stages landing) may overlap prepare's tail.
  grid_dependency_wait();
  if (steps > 0) load_vec(vec_next, h, m);
  if constexpr (LAG) {
    // The handshakes' arrivals of step -1 (kDsFull of buffer 1, kDsEmpty of buffer 0), so that every
    // step syncs unconditionally (a barrier under a branch between the products made ptxas spill).
    if (steps > 0) {
      named_barrier_arrive(kDsFull + 2 * wg + 1, 256);
      named_barrier_arrive(kDsEmpty + 2 * wg, 256);
    }
  }
  for (int step = 0; step < steps; ++step) {
    const uint32_t q_off = st.stage * Cfg::Q_BYTES;
    const uint32_t do_off = DVW ? st.stage * Cfg::DO_BYTES : q_off;  // dO's stage (DV columns)
    mbar_wait(full + st.stage, st.phase);
    // S^T = K_w Q^T and dP^T = V_w dO^T, as two groups: P is computed while dP^T is in flight.
    float s[QW / 2], dp[QW / 2];
    const auto score_mma = [&](float(&acc)[QW / 2], uint64_t da, uint64_t db, int k) {
      if constexpr (QW == 32)
        wgmma_ss_n32<T>(acc, da, db, k > 0);
      else
        wgmma_ss<QW, T>(acc, da, db, k > 0);
    };
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < D / 16; ++k)
      score_mma(s, desc_advance(k_a, (k / KPP) * BN * ROW + (k % KPP) * 32),
                desc_advance(q_b0, q_off + (k / KPP) * BM * ROW + (k % KPP) * 32), k);
    wgmma_commit();
#pragma unroll
    for (int k = 0; k < Cfg::DV / 16; ++k)
      score_mma(dp, desc_advance(v_a, (k / KPP) * BN * ROW + (k % KPP) * 32),
                desc_advance(do_b0, do_off + (k / KPP) * BM * ROW + (k % KPP) * 32), k);
    wgmma_commit();
    // Mask families with documents: the step's query block's id range (the pre-pass's), read while
    // the products run.
    int2 qid = make_int2(0, 0);
    if constexpr (Cfg::MASKS) {
      if (p.q_ids != nullptr) qid = p.q_ids[int64_t(t_.b()) * p.num_m_blocks + m];
    }
#pragma unroll
    for (int j = 0; j < VEC_PER_THREAD; ++j) vec[t + 128 * j] = vec_next[j];
    int m_next, h_next;
    [[maybe_unused]] int full_next = 0;
    if constexpr (Cfg::ASCENDING) {
      h_next = h + 1 == h_begin + p.group ? h_begin : h + 1;
      m_next = h_next == h_begin ? m - 1 : m;
    } else {
      m_next = m + 1 == m_end ? m_begin : m + 1;
      h_next = m_next == m_begin ? h + 1 : h;
    }
    if constexpr (Cfg::MASKS) {
      if (list != nullptr) {
        const BlockStep sn = block_step(ahead, h_begin);
        h_next = sn.h, m_next = sn.m, full_next = sn.full;
        if (step + 2 < steps) ahead = list[step + 2];
      }
    }
    if (step + 1 < steps) load_vec(vec_next, h_next, m_next);
    named_barrier_sync(kChunkBarrier + wg, 128);
    // dq_lag: the partner's dQ product of step - 2 has read dS^T buffer ds_buf (all 128 keys, so this
    // consumer's half too), which this step overwrites below. Here, beside the chunk barrier, rather
    // than just before the stores: there it made ptxas spill at d64.
    if constexpr (LAG) named_barrier_sync(kDsEmpty + 2 * (1 - wg) + ds_buf, 256);

    // P^T: register i holds key key0 + 8 * ((i >> 1) & 1), query q_base + 8 * (i >> 2) + 2q + (i & 1).
    // Masked only where the block is not inside every row's window or crosses the end of the keys or
    // of the rows (fixed length: rows past seqlen_q have P = 0 already, LSE = +inf; varlen: they are
    // the next sequence's rows, with its LSE).
    const int sq = t_.sq(), sk = t_.sk(), shift = sk - sq;
    const bool edges = (n_block + 1) * BN > sk || (m + 1) * BM > sq;
    const bool window_cut = cuda::mods_key_begin(p.mods, m * BM + BM - 1, shift, sk) > n_block * BN ||
                            cuda::mods_key_end(p.mods, m * BM, shift, sk) < (n_block + 1) * BN;
    bool masked = edges || window_cut;
    if constexpr (Cfg::MASKS) {
      // Mask families (header, "Mask families"): keys wholly inside the prefix ignore the window, a
      // block across the prefix's end is element-masked; with documents, a block is whole only if all
      // its rows and keys hold one id. A block mask's full block admits every element: only the
      // edges.
      const int prefix = t_.prefix(), k_first = n_block * BN;
      masked = k_first + BN <= prefix ? edges : k_first < prefix || masked;
      const int id_lo = t_.key_id_lo();
      if (p.q_ids != nullptr) masked = masked || !(qid.x == qid.y && qid.x == id_lo && id_lo == t_.key_id_hi());
      if (full_block) masked = edges;
      if (p.mod_steps != nullptr && !full_block) masked = true;  // a mask mod's partial block: its bits
    }
    const auto visible = [&](int i, int odd) {  // register i (+ odd) of this thread: inside the keys, rows, window
      const int key = key0 + 8 * acc_half(i), row = m * BM + q_base + 8 * acc_group(i) + 2 * q + odd;
      const int d = key - row - shift;
      return key < sk && row < sq && d >= dlo && d <= dhi;
    };
    // The plain and ALiBi paths mask the scores (-inf, so exp2 gives 0) in a pass of their own under
    // one branch, before the exponentials: inside their loop, a per-element `if (masked)` on p is
    // if-converted by ptxas into predicated compares and selects that every step issues, masked or
    // not (37 % of the d64 kernel's instructions). (The softcap paths keep it on p: tanh(-inf) is -1.)
    const auto mask_scores = [&](float(&x)[QW / 2]) {
      if (!masked) return;
      if constexpr (Cfg::MASKS) {
        // The element rule (mask_ext.cuh, ext_visible): inside the keys and rows, of the row's
        // document, and before the prefix or inside the window. The ids are read here, in partial
        // blocks only: the thread's two keys, then its rows one by one (register i = 4 group + 2 half
        // + odd: row 8 group + 2q + odd, key key0 + 8 half).
        // A block mask's full block: only the edges (no ids read, every row and key of one "document").
        // A mask mod's partial step: the step's bit tile (the pre-pass's pointer beside its list entry,
        // at the step's first row and the CTA's first key; null: no tile, nothing visible), one word per
        // row holding both of the thread's keys (kc and kc + 8 share their 16-key group's word).
        const int prefix = t_.prefix(), b = t_.b();
        const bool ids = p.doc_q != nullptr && !full_block;
        const int32_t *ids_q = ids ? p.doc_q + int64_t(b) * p.doc_q_stride : nullptr;
        const int32_t *ids_k = ids ? p.doc_k + int64_t(b) * p.doc_k_stride : nullptr;
        const bool mod = p.mod_steps != nullptr && !full_block;
        const uint32_t *bits = mod ? p.mod_steps[(list - p.block_steps) + step] : nullptr;
        const int kc = key0 - n_block * BN;
        int kid[2];
#pragma unroll
        for (int kh = 0; kh < 2; ++kh) kid[kh] = ids_k != nullptr && key0 + 8 * kh < sk ? ids_k[key0 + 8 * kh] : 0;
#pragma unroll
        for (int grp = 0; grp < QW / 8; ++grp)
#pragma unroll
          for (int odd = 0; odd < 2; ++odd) {
            const int row = m * BM + q_base + 8 * grp + 2 * q + odd;
            const int rid = ids_q != nullptr && row < sq ? ids_q[row] : 0;
            const uint32_t word =
                !mod ? ~0u : bits != nullptr ? cuda::mod_word(bits, p.mod_words, row - m * BM, kc) : 0u;
#pragma unroll
            for (int kh = 0; kh < 2; ++kh) {
              const int key = key0 + 8 * kh, d = key - row - shift;
              const bool admitted = (word >> ((kc + 8 * kh) & 31)) & 1u;
              const bool vis = key < sk && row < sq &&
                               (full_block || (rid == kid[kh] && admitted && (key < prefix || (d >= dlo && d <= dhi))));
              if (!vis) x[4 * grp + 2 * kh + odd] = -INFINITY;
            }
          }
      } else {
#pragma unroll
        for (int i = 0; i < QW / 2; i += 2) {
          if (!visible(i, 0)) x[i] = -INFINITY;
          if (!visible(i, 1)) x[i + 1] = -INFINITY;
        }
      }
    };
    // dS^T = P^T ∘ (dP^T − D), in place in dP^T's registers (s holds P^T): the plain and ALiBi paths,
    // where nothing else multiplies dS.
    const auto ds_from_p = [&] {
#pragma unroll
      for (int i = 0; i < QW / 2; i += 2) {
        const float2 dsum = *reinterpret_cast<const float2 *>(vec + BM + q_base + 8 * acc_group(i) + 2 * q);
        dp[i] = s[i] * (dp[i] - dsum.x);
        dp[i + 1] = s[i + 1] * (dp[i + 1] - dsum.y);
      }
    };
    if (Cfg::MASKS || !p.transforms) {  // (the mask families' kernel has no transforms: the plan declines them)
      wgmma_wait<1>();
      fence_operands(s);
      // d32 keeps the mask in the loop: with the pass, its 208-register consumers spilled 4-8 B.
      constexpr bool kMaskPass = D != 32;
      if constexpr (kMaskPass) mask_scores(s);
#pragma unroll
      for (int i = 0; i < QW / 2; i += 2) {
        const int col = q_base + 8 * acc_group(i) + 2 * q;
        const float2 lse = *reinterpret_cast<const float2 *>(vec + col);
        float p0 = exp2f(fmaf(s[i], p.scale_log2, -lse.x));
        float p1 = exp2f(fmaf(s[i + 1], p.scale_log2, -lse.y));
        if (!kMaskPass && masked) {
          if (!visible(i, 0)) p0 = 0.f;
          if (!visible(i, 1)) p1 = 0.f;
        }
        s[i] = p0;
        s[i + 1] = p1;
      }
      wgmma_wait<0>();
      fence_operands(dp);
      ds_from_p();
    } else if (Cfg::OVERLAP_ALIBI && !p.mods.capped()) {
      // ALiBi alone (d64, d128) with the plain path's overlap: nothing multiplies dS, so only P's
      // exponent changes, by the bias -slope · |row + shift - key| (two FP ops per score).
      wgmma_wait<1>();
      fence_operands(s);
      const float slope_log2 = cuda::mods_slope(p.mods, t_.b(), h) * kLog2e;
      const float a0 = float(m * BM + q_base + 2 * q + shift - key0);  // row + shift - key of register 0
      mask_scores(s);
#pragma unroll
      for (int i = 0; i < QW / 2; i += 2) {
        const int col = q_base + 8 * acc_group(i) + 2 * q;
        const float2 lse = *reinterpret_cast<const float2 *>(vec + col);
        const float a = a0 + float(8 * acc_group(i) - 8 * acc_half(i));
        s[i] = exp2f(fmaf(s[i], p.scale_log2, fmaf(-slope_log2, fabsf(a), -lse.x)));
        s[i + 1] = exp2f(fmaf(s[i + 1], p.scale_log2, fmaf(-slope_log2, fabsf(a + 1.f), -lse.y)));
      }
      wgmma_wait<0>();
      fence_operands(dp);
      ds_from_p();
    } else if constexpr (Cfg::OVERLAP_CAP) {
      // Softcap, with or without ALiBi (d128) with the plain path's overlap: t = tanh(s · scale / cap)
      // and P while dP^T's product runs; across the wait only u = 1 - t² more, two per register as
      // f16x2 (u in [0, 1]; f16's 2^-11 is below tanh.approx's own error and dS's bf16 rounding):
      // QW / 4 = 16 registers. Then dS = P ∘ (dP - D) ∘ u.
      wgmma_wait<1>();
      fence_operands(s);
      const float slope_log2 = p.mods.alibi() ? cuda::mods_slope(p.mods, t_.b(), h) * kLog2e : 0.f;
      const float a0 = float(m * BM + q_base + 2 * q + shift - key0);  // row + shift - key of register 0
      uint32_t u[QW / 4];
#pragma unroll
      for (int i = 0; i < QW / 2; i += 2) {
        const int col = q_base + 8 * acc_group(i) + 2 * q;
        const float2 lse = *reinterpret_cast<const float2 *>(vec + col);
        const float a = a0 + float(8 * acc_group(i) - 8 * acc_half(i));
        const float t0 = cuda::tanh_approx(s[i] * p.cap_pre), t1 = cuda::tanh_approx(s[i + 1] * p.cap_pre);
        float p0 = exp2f(fmaf(-slope_log2, fabsf(a), fmaf(t0, p.unit_log2, -lse.x)));
        float p1 = exp2f(fmaf(-slope_log2, fabsf(a + 1.f), fmaf(t1, p.unit_log2, -lse.y)));
        if (masked) {
          if (!visible(i, 0)) p0 = 0.f;
          if (!visible(i, 1)) p1 = 0.f;
        }
        s[i] = p0;
        s[i + 1] = p1;
        u[i / 2] = pack2<__half>(fmaf(-t0, t0, 1.f), fmaf(-t1, t1, 1.f));
      }
      wgmma_wait<0>();
      fence_operands(dp);
#pragma unroll
      for (int i = 0; i < QW / 2; i += 2) {
        const float2 dsum = *reinterpret_cast<const float2 *>(vec + BM + q_base + 8 * acc_group(i) + 2 * q);
        const float2 ug = __half22float2(*reinterpret_cast<const __half2 *>(&u[i / 2]));
        dp[i] = s[i] * (dp[i] - dsum.x) * ug.x;
        dp[i + 1] = s[i + 1] * (dp[i + 1] - dsum.y) * ug.y;
      }
    } else {
      // Softcap and/or ALiBi where the overlap is not built (softcap at d64, both at d32, d96, d192,
      // d256): both products complete, then P^T and dS^T in one pass (file header).
      const float slope_log2 = p.mods.alibi() ? cuda::mods_slope(p.mods, t_.b(), h) * kLog2e : 0.f;
      const bool capped = p.mods.capped();
      // row + shift - key of register 0 (query m * BM + 2q, key key0), as a float for the bias.
      const float a0 = float(m * BM + q_base + 2 * q + shift - key0);
      wgmma_wait<0>();
      fence_operands(s);
      fence_operands(dp);
      // softcap_select: the mask as -inf scores from mask_scores' pass, and in the loop one float
      // compare and select per score instead of the visibility test's integer compares (if-converted
      // into every step). tanh(-inf) = -1 would give p > 0, hence the
      // select; a score is -inf only if masked (finite inputs).
      constexpr bool kSelMask = Cfg::CAP_SELECT;
      if constexpr (kSelMask) mask_scores(s);
#pragma unroll
      for (int i = 0; i < QW / 2; ++i) {
        const int col = q_base + 8 * acc_group(i) + 2 * q + (i & 1);
        const float lse = vec[col], dsum = vec[BM + col];
        const bool gone = kSelMask && s[i] == -INFINITY;  // (read before s[i] is overwritten)
        float v = s[i], grad = 1.f;
        if (capped) {
          v = cuda::tanh_approx(v * p.cap_pre);
          grad = fmaf(-v, v, 1.f);
        }
        float x = fmaf(v, p.unit_log2, -lse);
        x = fmaf(-slope_log2, fabsf(a0 + float(8 * acc_group(i) + (i & 1) - 8 * acc_half(i))), x);
        float pr = exp2f(x);
        if (kSelMask ? gone : masked && !visible(i & ~1, i & 1)) pr = 0.f;
        s[i] = pr;
        dp[i] = pr * (dp[i] - dsum) * grad;
      }
    }
    uint32_t pa[QW / 4], dsa[QW / 4];
    scores_to_a_fragments<T>(s, pa);
    scores_to_a_fragments<T>(dp, dsa);

    // dS^T (and with SPLIT_D P^T) into shared memory: row = key in the block, 64-query panels of
    // 128-B swizzled rows; SPLIT_D: this consumer's 32 queries of them.
    const uint32_t ds_tile = base + Cfg::DS_OFF + ds_buf * Cfg::DS_BYTES;
    if constexpr (!Cfg::DS_STMATRIX) {
      const uint32_t pt_tile = base + Cfg::PT_OFF + ds_buf * Cfg::PT_BYTES;
#pragma unroll
      for (int i = 0; i < QW / 2; i += 2) {
        const int row = key_row0 + warp * 16 + g + 8 * acc_half(i);
        const int col = q_base + 8 * acc_group(i) + 2 * q;
        const uint32_t off = swizzled_128b(0, BN, row, col) + (col % 8) * 2;
        asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(ds_tile + off), "r"(dsa[i / 2]) : "memory");
        if constexpr (Cfg::SPLIT_D)
          asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(pt_tile + off), "r"(pa[i / 2]) : "memory");
      }
    } else {
      // One stmatrix per 16-query k-step (the st.shared.b32 loop above does four per k-step, each
      // with its own address): the A fragment of k-step k, dsa[4k + j], is four
      // 8 x 8 b16 matrices in stmatrix's thread layout (lane l: row l / 4, columns 2 (l % 4), + 1);
      // matrix j covers the warp's key rows 8 (j & 1).. and queries 16 k + 8 (j >> 1)..; lanes
      // 8j..8j+7 give the addresses of its rows, each 8-query row segment 16 contiguous bytes of the
      // swizzled layout (as the sm90 forward stores O).
      // Lane l's segment of k-step k is chunk 2 (k % 4) + (l >> 4) of its row in panel k / 4, i.e.
      // (the swizzle being an XOR with row % 8, the tile 1024-B aligned) k-step 0's address XOR
      // 32 (k % 4), plus the panel: one LOP3 per k-step.
      const int mrow = key_row0 + warp * 16 + 8 * ((lane >> 3) & 1) + (lane & 7);
      const uint32_t seg0 = ds_tile + swizzled_128b(0, BN, mrow, 8 * (lane >> 4));
#pragma unroll
      for (int k = 0; k < QW / 16; ++k)
        stmatrix_x4((seg0 ^ ((k % 4) << 5)) + (k / 4) * BN * 128, dsa[4 * k], dsa[4 * k + 1], dsa[4 * k + 2],
                    dsa[4 * k + 3]);
    }
    fence_view_async_shared();
    if constexpr (LAG) named_barrier_arrive(kDsFull + 2 * wg + ds_buf, 256);  // this half of step's dS^T

    if constexpr (Cfg::SPLIT_D) {
      // Both consumers' halves of P^T and dS^T are in shared memory: dV += P^T dO (both operands in
      // shared memory, A K-major, B N-major), then dQ and dK below read them too.
      named_barrier_sync(kDsBarrier, 256);
      if constexpr (!ONE_GRAD) {
        wgmma_fence();
#pragma unroll
        for (int k = 0; k < BM / 16; ++k)
          wgmma_ss_tb_n128<T>(dv, desc_advance(pt_a, ds_buf * Cfg::PT_BYTES + k * 32),
                              desc_advance(do_mn0, q_off + k * 2048), 1);
        wgmma_commit();
      }
    } else {
      // dV += P^T dO (A from registers, B N-major).
      wgmma_fence();
#pragma unroll
      for (int k = 0; k < BM / 16; ++k)
        wgmma_rs<COLS, T>(dv, reinterpret_cast<const uint32_t(&)[4]>(pa[4 * k]),
                          desc_advance(do_mn0, q_off + k * 16 * ROW), 1);
      wgmma_commit();
      // dQ chunk = dS K once both consumers' dS^T is in shared memory, then dK += dS^T Q. dq_lag: the
      // chunk of step - 1 (buffer ds_buf ^ 1), whose other half the partner wrote a step ago.
      if constexpr (LAG) {
        named_barrier_sync(kDsFull + 2 * (1 - wg) + (ds_buf ^ 1), 256);
      } else {
        named_barrier_sync(kDsBarrier, 256);
      }
    }
    float dq[32];
    // dq_lag: no chunk at step 0 (the last one comes after the loop); the product is issued anyway,
    // with A read from the K tile (read-only, so no race) and the result dropped: a wgmma under a
    // branch made ptxas serialize the products and spill (C7512).
    const bool has_dq = !LAG || step > 0;
    wgmma_fence();
    if constexpr (LAG) {
      const uint64_t dq_a = has_dq ? desc_advance(ds_a0, (ds_buf ^ 1) * Cfg::DS_BYTES)
                                   : make_smem_desc(base + Cfg::K_OFF, BN * 128, 1024);
#pragma unroll
      for (int k = 0; k < BN / 16; ++k)
        wgmma_ss_mn_n64<T>(dq, desc_advance(dq_a, k * 2048), desc_advance(k_mn, k * 16 * ROW), k > 0);
    } else {
#pragma unroll
      for (int k = 0; k < BN / 16; ++k)
        wgmma_ss_mn_n64<T>(dq, desc_advance(ds_a0, ds_buf * Cfg::DS_BYTES + k * 2048),
                           desc_advance(k_mn, k * 16 * ROW), k > 0);
    }
    wgmma_commit();
    if constexpr (DVW && ROLE == 0) {
      // DV != D: consumer 0's dV, DV = 128 columns of dO's stage (P^T from shared memory).
#pragma unroll
      for (int k = 0; k < BM / 16; ++k)
        wgmma_ss_tb_n128<T>(dv, desc_advance(pt_a, ds_buf * Cfg::DS_BYTES + k * 32),
                            desc_advance(do_mn0, do_off + k * 2048), 1);
    } else if constexpr (ONE_GRAD) {
      // This consumer's gradient (dV or dK), all 192 columns, while its first dQ chunk's adds go out.
#pragma unroll
      for (int k = 0; k < BM / 16; ++k)
        wgmma_ss_tb_n192<T>(dv, desc_advance(grad_a, ds_buf * Cfg::DS_BYTES + k * 32),
                            desc_advance(grad_b, q_off + k * 2048), 1);
    } else if constexpr (Cfg::SPLIT_D) {
#pragma unroll
      for (int k = 0; k < BM / 16; ++k)
        wgmma_ss_tb_n128<T>(dk, desc_advance(dst_a, ds_buf * Cfg::DS_BYTES + k * 32),
                            desc_advance(q_mn0, q_off + k * 2048), 1);
    } else {
#pragma unroll
      for (int k = 0; k < BM / 16; ++k)
        wgmma_rs<COLS, T>(dk, reinterpret_cast<const uint32_t(&)[4]>(dsa[4 * k]),
                          desc_advance(q_mn0, q_off + k * 16 * ROW), 1);
    }
    wgmma_commit();
    wgmma_wait<1>();  // dV and dQ done; dK (ONE_GRAD: the gradient) still in flight while the dQ chunk goes out
    fence_operands(dq);
    // dq_lag: this consumer no longer reads buffer ds_buf ^ 1 (step - 1's); the partner overwrites its
    // half at step + 1, if there is one.
    if constexpr (LAG) named_barrier_arrive(kDsEmpty + 2 * wg + (ds_buf ^ 1), 256);

    if constexpr (Cfg::SPLIT_D) {
      // dq_chunks chunks (two; at 192 one or two), each added from registers into the global
      // accumulator in the staging order (float4 j of thread t at (j * 128 + t) * 4: 512 contiguous
      // bytes per warp and j); the second chunk's product runs after the first one's adds were
      // issued. The block's rows are D (the instantiation's 192 or 256) floats wide; fixed length
      // only (accum_row = block_row there).
      float *acc = p.dq_accum + accum_row(p, t_, h, m, BM) * D;
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        if (c >= dq_chunks) break;
        if (c == 1) {
          wgmma_fence();
#pragma unroll
          for (int k = 0; k < BN / 16; ++k)
            wgmma_ss_mn_n64<T>(dq, desc_advance(ds_a0, ds_buf * Cfg::DS_BYTES + k * 2048),
                               desc_advance(k_mn, BN * 128 + k * 2048), k > 0);  // head_dim panel + 1
          wgmma_commit();
          wgmma_wait<0>();
          fence_operands(dq);
        }
        float4 *dst = reinterpret_cast<float4 *>(acc + (dq_chunk0 + c) * Cfg::DQ_CHUNK_FLOATS) + t;
#pragma unroll
        for (int j = 0; j < 8; ++j)
          atomicAdd(dst + j * 128, make_float4(dq[4 * j], dq[4 * j + 1], dq[4 * j + 2], dq[4 * j + 3]));
      }
    } else if (has_dq) {
      stage_dq(dq, step & 1);
    }

    wgmma_wait<0>();
    fence_operands(dv);
    fence_operands(dk);
    fence_operands(pa);
    fence_operands(dsa);
    if (lane == 0) mbar_arrive(empty + st.stage);  // Q_i and dO_i no longer read
    st.advance();
    ds_buf ^= 1;
    h = h_next, m = m_next;
    if constexpr (Cfg::MASKS) full_block = full_next;
  }
  if constexpr (LAG) {
    // The last step's dQ chunk (buffer ds_buf ^ 1), once the partner's half of it is written.
    if (steps > 0) {
      named_barrier_sync(kDsFull + 2 * (1 - wg) + (ds_buf ^ 1), 256);
      named_barrier_sync(kDsEmpty + 2 * (1 - wg) + ds_buf, 256);  // the partner's last arrival
      float dq[32];
      wgmma_fence();
#pragma unroll
      for (int k = 0; k < BN / 16; ++k)
        wgmma_ss_mn_n64<T>(dq, desc_advance(ds_a0, (ds_buf ^ 1) * Cfg::DS_BYTES + k * 2048),
                           desc_advance(k_mn, k * 16 * ROW), k > 0);
      wgmma_commit();
      wgmma_wait<0>();
      fence_operands(dq);
      stage_dq(dq, 0);  // dq_lag: never two writers
    }
  }
  if constexpr (DVW) {  // consumer 0 dV (head_dim_v columns), consumer 1 dK
    store_rows<Cfg, ACC>(ROLE == 0 ? p.dv : p.dk, ROLE == 0 ? p.dv_stride : p.dk_stride, t_.tb(), hk, t_.k0(), key_base,
                         t_.sk(), 0, ROLE == 0 ? p.head_dim_v : p.head_dim, dv, ROLE == 0 ? 1.f : p.scale);
  } else if constexpr (ONE_GRAD) {
    store_rows<Cfg>(wg == 0 ? p.dv : p.dk, wg == 0 ? p.dv_stride : p.dk_stride, t_.tb(), hk, t_.k0(), key_base,
                    t_.sk(), 0, p.head_dim, dv, wg == 0 ? 1.f : p.scale);
  } else {
    store_rows<Cfg>(p.dv, p.dv_stride, t_.tb(), hk, t_.k0(), key_base, t_.sk(), col0, p.head_dim, dv, 1.f);
    store_rows<Cfg>(p.dk, p.dk_stride, t_.tb(), hk, t_.k0(), key_base, t_.sk(), col0, p.head_dim, dk, p.scale);
  }
}

}  // namespace flashbox::sm90::bwd
