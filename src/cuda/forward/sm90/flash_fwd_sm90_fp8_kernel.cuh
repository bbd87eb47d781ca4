// FP8 (e4m3) FlashAttention forward for Hopper (sm_90a): Q, K, V in e4m3 with per-(batch, kv head)
// descales, O in bf16 or fp16, LSE in fp32 (FlashAttention-3's fp8 forward, FA3 paper §3.3).
//
// Roles as in the bf16 kernel (cuda/forward/sm90/flash_fwd_sm90_kernel.cuh; FA3 §3.1-3.2): warpgroup 0
// is the producer (one thread issues TMA loads of Q, then K_j and V^T_j into two-stage rings, K one
// block ahead of V), warpgroups 1 and 2 are the consumers (64 query rows each), which take turns at the
// tensor cores through named barriers (ping-pong) and overlap the softmax of block j with the P.V
// product of block j - 1 inside a warpgroup.
//
// Why V^T, written by a pre-pass: an fp8 wgmma reads both shared-memory operands K-major (there is
// no transpose flag for e4m3), so the B operand of O += P V must be V^T with keys contiguous. Three
// ways were open: FA3's in-kernel transpose (the producer warpgroup reads each V tile from shared
// memory and writes it back transposed with ldmatrix/stmatrix, one extra pass over every V stage in
// every CTA of every query block), permuting P's registers with shuffles (per block, in the softmax's
// critical path), or a pre-pass (flash_fwd_sm90_fp8.cu, transpose_v) that writes V^T once per call to
// scratch memory: [batch, heads_kv, head_dim, keys rounded up to BN], 2 * T * D bytes of traffic per kv
// head (read V, write V^T) against 4 * T^2 * D / (query rows per CTA...) FLOPs of the main kernel: at
// T = 2048 the pre-pass moves 0.5 MB per head where the forward does 2 GFLOP, well under 1 % of the
// forward's time at 3 TB/s against 1 PFLOP/s. The pre-pass was chosen because it keeps the kernel
// the bf16 kernel's shape (a V^T stage is loaded by the TMA like a K stage) and costs the main loop
// nothing; the kernel is launched as the pre-pass's programmatic dependent, so the pre-pass's launch
// gap and tail overlap this kernel's set-up and first Q and K loads (the producer waits for it only
// before the first V^T load). Its key order is permuted inside every 16 keys (key_of_position below) so that the fp32
// accumulator of S = Q K^T converts to the e4m3 A fragment of P (cuda/hopper/wgmma_fp8.cuh) in place,
// register by register, without shuffles: the product sums over positions, and position c of P and
// of V^T hold the same key.
//
// Scales: a tile's scores are q_descale * k_descale * softmax_scale in units of the raw e4m3 product
// (folded into the exp2's FFMA), and v_descale multiplies O once, in the epilogue. P is quantized to
// e4m3 as p' = exp2((s - m) * scale_log2 + 8) in [0, 256] (FA3's max offset 8: e4m3 keeps 3 mantissa
// bits down to 2^-6, so scaling P up by 2^8 keeps small probabilities out of the subnormals), and l is
// the fp32 sum of the unrounded p' (the 2^8 cancels in O / l and is taken out of the LSE). The running
// max is exact (every block's max is reduced): the bf16 kernel's lazy and optimistic rescales let p
// grow to 2^8 or 2^12, past e4m3's 448 with the offset.
// Masks: causal (bottom-right aligned, as the bf16 kernel) and the end of the keys; only the blocks
// crossing the diagonal or the end are masked. Fixed-length batches only; the plan declines the rest
// (windows, softcap, ALiBi, sinks, varlen, head_dim_v != head_dim).
// Epilogue: O * v_descale / l rounded to the output dtype and stored from registers (4-byte stores: a
// quad writes 16 contiguous bytes of a row), LSE (natural log) from the lanes that own column 0.
// Scheduling: the bf16 kernel's (flash_fwd_sm90_pipeline.cuh): a persistent grid (one CTA per SM)
// walks the tiles in a snake over rounds of the longest-first order, or one CTA per tile (the plan's
// choice, tile_policy.hpp); the rings' (stage, parity), the Q buffer's parity and the ping-pong turns
// run on across a CTA's tiles, and Q is released after a tile's last S = Q K^T, so the next tile's Q
// loads under the last P.V and the epilogue (O leaves from registers, not through Q's buffer).
// Head dims: D = 128 (head_dim 16..128, multiples of 16) and D = 256 (144..256); a head_dim below D is
// served by the TMA's zero fill (as the bf16 kernel: columns past head_dim add zeros to S, and O's
// columns past it are never stored).
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstdint>

#include "cuda/forward/sm90/flash_fwd_sm90_pipeline.cuh"
#include "cuda/hopper/async_copy.cuh"
#include "cuda/hopper/fragment.cuh"
#include "cuda/hopper/grid_dependency.cuh"
#include "cuda/hopper/online_softmax.cuh"
#include "cuda/hopper/tma_host.hpp"
#include "cuda/hopper/wgmma.cuh"
#include "cuda/hopper/wgmma_fp8.cuh"

namespace flashbox::sm90::fp8 {

// The key held at position c (0..15) of every 16-key group of V^T: positions 4q .. 4q+3 hold keys
// 2q, 2q+1, 8+2q, 9+2q, the four S columns thread q of a quad owns in that group (fragment.cuh), so
// that P's registers become the A fragment's bytes in place (to_p_fragments).
__host__ __device__ __forceinline__ constexpr int key_of_position(int c) {
  return 8 * ((c >> 1) & 1) + 2 * (c >> 2) + (c & 1);
}

// FA3's max offset: p' = p * 2^8 (see the opening comment).
constexpr float kPOffsetLog2 = 8.f;

struct FwdFp8Params {
  CUtensorMap tm_q, tm_k, tm_vt;
  TmaOrder ord_q, ord_k;
  int seqlen_q, seqlen_k, heads_q, heads_kv, group, batch, num_m_blocks, num_tiles;
  int section_heads;  // (batch, head) pairs per L2 section of the tile order (decode_fixed_tile)
  int causal;
  float scale;  // softmax scale (the call's, before the descales)
  // fp32 [batch, heads_kv] descales, element (b, g) at b * stride[0] + g * stride[1]; null = 1.
  const float *q_descale, *k_descale, *v_descale;
  int64_t qd_stride[2], kd_stride[2], vd_stride[2];
  void *o;                               // [batch, seqlen_q, heads_q, head_dim] in bf16 or fp16
  int64_t o_batch, o_seq, o_head;        // elements
  int head_dim, o_bf16;                  // columns stored; 1: bf16 output, 0: fp16
  float *lse;                            // [batch, heads_q, seqlen_q] or null
};

// Compile-time configuration: head dim D, key block BN, two consumer warpgroups (BM = 128 rows).
// Shared memory: Q (BM x D), the K ring (STAGES x BN x D) and the V^T ring (STAGES x D x BN), e4m3,
// in 128B-swizzled panels of 128 columns (128-byte rows), then the barriers.
template <int D_, int BN_, int STAGES_>
struct Fp8Config {
  static constexpr int D = D_, BN = BN_, STAGES = STAGES_, NWG = 2, BM = 128;
  static constexpr int PANELS = D / 128;  // 128-byte columns of a Q or K row
  static constexpr int THREADS = 128 * (NWG + 1);
  static constexpr int PRODUCER_REGS = 24, CONSUMER_REGS = 240;
  static constexpr int Q_BYTES = BM * D, KV_BYTES = BN * D;
  static constexpr int Q_OFF = 0, K_OFF = Q_BYTES, V_OFF = K_OFF + STAGES * KV_BYTES;
  static constexpr int BAR_OFF = V_OFF + STAGES * KV_BYTES;
  static constexpr int SMEM_BYTES = BAR_OFF + (2 + 4 * STAGES) * 8 + 1024;  // + slack to align the base
  static_assert(D == 128 || D == 256, "head_dim 128 or 256");
  static_assert(BN == 128, "a V^T row is one 128-byte swizzle row of BN keys");
  static_assert(SMEM_BYTES <= 227 * 1024, "shared memory");
};

// Named barriers: 0 is __syncthreads; 1 and 2 the ping-pong turns of the two consumer warpgroups.
constexpr int kTurnBarrier = 1;

// Tile t in the bf16 kernel's fixed-length order (flash_fwd_sm90_pipeline.cuh): L2 sections of
// heads, the longest query block first inside one; CTAs take positions in a snake over rounds
// (tile_position), on a grid of one CTA per tile or a persistent one (one CTA per SM).
using Tile = FixedTile;
__device__ __forceinline__ Tile decode_tile(const FwdFp8Params &p, int t) {
  return decode_fixed_tile(t, p.num_m_blocks, p.num_tiles / p.num_m_blocks, p.section_heads, p.heads_q);
}

// The K/V blocks the rows [r_first, r_last] see: [0, n_end); blocks from full_end on need a mask
// (the causal diagonal, bottom-right aligned: row r sees keys < r + seqlen_k - seqlen_q + 1; the end of
// the keys).
struct BlockRange {
  int n_end, full_end;
};
__device__ __forceinline__ BlockRange block_range(const FwdFp8Params &p, int r_first, int r_last, int BN) {
  const int sk = p.seqlen_k, shift = sk - p.seqlen_q;
  if (!p.causal) return {(sk + BN - 1) / BN, sk / BN};
  const int some_end = min(sk, r_last + shift + 1), all_end = min(sk, r_first + shift + 1);
  if (some_end <= 0) return {0, 0};
  return {(some_end + BN - 1) / BN, max(all_end, 0) / BN};
}
__device__ __forceinline__ BlockRange tile_range(const FwdFp8Params &p, int m_block, int BM, int BN) {
  const int r_first = m_block * BM, r_last = min(r_first + BM, p.seqlen_q) - 1;
  return block_range(p, r_first, r_last, BN);
}

__device__ __forceinline__ float descale_of(const float *d, const int64_t (&stride)[2], int b, int g) {
  return d != nullptr ? d[b * stride[0] + g * stride[1]] : 1.f;
}

// One thread: per tile, the last K block, Q once its buffer is free, then K_{j-1} with V_j, down to
// V_0 (the consumers walk the blocks from the last down, as the bf16 kernel).
template <class Cfg>
__device__ __forceinline__ void producer(const FwdFp8Params &p, uint8_t *smem, Barriers bars) {
  tma_prefetch_map(&p.tm_q);
  tma_prefetch_map(&p.tm_k);
  tma_prefetch_map(&p.tm_vt);
  uint32_t ks = 0, vs = 0;
  const auto load_k = [&](int n_block, int hk, int b) {
    const uint32_t stage = ks % Cfg::STAGES, phase = (ks / Cfg::STAGES) & 1;
    mbar_wait(bars.empty_k + stage, phase ^ 1);
    mbar_expect_tx_arrive(bars.full_k + stage, Cfg::KV_BYTES);
    load_tile<Cfg::PANELS, 128>(smem + Cfg::K_OFF + stage * Cfg::KV_BYTES, Cfg::BN * 128, &p.tm_k, p.ord_k,
                                bars.full_k + stage, n_block * Cfg::BN, hk, b);
    ++ks;
  };
  // V^T's map is {keys, head_dim, heads_kv, batch}: one box of D rows x BN keys. The kernel is the
  // pre-pass's programmatic dependent (flash_fwd_sm90_fp8_launch.hpp): V^T is read only once that grid
  // has completed (this is the only thread that reads it; Q and K were written before the pre-pass
  // started, so their loads need no wait).
  bool vt_ready = false;
  const auto load_v = [&](int n_block, int hk, int b) {
    if (!vt_ready) grid_dependency_wait(), vt_ready = true;
    const uint32_t stage = vs % Cfg::STAGES, phase = (vs / Cfg::STAGES) & 1;
    mbar_wait(bars.empty_v + stage, phase ^ 1);
    mbar_expect_tx_arrive(bars.full_v + stage, Cfg::KV_BYTES);
    tma_load_4d(smem + Cfg::V_OFF + stage * Cfg::KV_BYTES, &p.tm_vt, bars.full_v + stage, n_block * Cfg::BN, 0, hk, b);
    ++vs;
  };
  // The Q-buffer parity follows from `round`, which counts this CTA's tiles (only the last round can
  // skip one).
  for (int round = 0; round * int(gridDim.x) < p.num_tiles; ++round) {
    const int t = tile_position(round);
    if (t >= p.num_tiles) continue;
    const Tile tile = decode_tile(p, t);
    const BlockRange range = tile_range(p, tile.m_block, Cfg::BM, Cfg::BN);
    const int hk = tile.h / p.group, last = range.n_end - 1;
    if (range.n_end > 0) load_k(last, hk, tile.b);
    mbar_wait(bars.empty_q, (round & 1) ^ 1);
    mbar_expect_tx_arrive(bars.full_q, Cfg::Q_BYTES);
    load_tile<Cfg::PANELS, 128>(smem + Cfg::Q_OFF, Cfg::BM * 128, &p.tm_q, p.ord_q, bars.full_q,
                                tile.m_block * Cfg::BM, tile.h, tile.b);
    if (range.n_end == 0) continue;
    for (int n = last - 1; n >= 0; --n) {
      load_k(n, hk, tile.b);
      load_v(n + 1, hk, tile.b);
    }
    load_v(0, hk, tile.b);
  }
  // A CTA without a V^T load still ends after the pre-pass, so that the grid's completion (which the
  // stream's next work and the scratch's stream-ordered free wait for) implies the pre-pass's.
  if (!vt_ready) grid_dependency_wait();
}

// S = Q K^T for one warpgroup's 64 rows: D/32 k-steps of 32 bytes, four per 128-byte panel.
template <class Cfg>
__device__ __forceinline__ void gemm_qk(float (&s)[Cfg::BN / 2], uint64_t q_desc, uint64_t k_desc) {
#pragma unroll
  for (int k = 0; k < Cfg::D / 32; ++k)
    wgmma_fp8_ss_n128(s, desc_advance(q_desc, (k / 4) * Cfg::BM * 128 + (k % 4) * 32),
                      desc_advance(k_desc, (k / 4) * Cfg::BN * 128 + (k % 4) * 32), k > 0);
}

// O += P V: BN/32 k-steps, P from registers, V^T (D rows of BN keys, K-major); N = 128 per product,
// D / 128 products per k-step (the second half of O's columns is V^T's rows 128..255).
template <class Cfg>
__device__ __forceinline__ void gemm_pv(float (&o)[Cfg::D / 2], const uint32_t (&pa)[Cfg::BN / 8], uint64_t v_desc) {
#pragma unroll
  for (int k = 0; k < Cfg::BN / 32; ++k)
#pragma unroll
    for (int h = 0; h < Cfg::D / 128; ++h)
      wgmma_fp8_rs_n128(reinterpret_cast<float(&)[64]>(o[h * 64]), reinterpret_cast<const uint32_t(&)[4]>(pa[4 * k]),
                        desc_advance(v_desc, k * 32 + h * 128 * 128), 1);
}

// P (fp32 accumulator of S, p' in [0, 256]) -> e4m3 A fragments of O += P V. Registers 16k .. 16k+15
// hold keys 32k .. 32k+31 of this thread's two rows (fragment.cuh: groups 4k .. 4k+3); with V^T's key
// order (key_of_position) the fragment of k-step k is, in place:
//   a0 = row g:     s[16k + {0, 1, 4, 5}]     a1 = row g + 8: s[16k + {2, 3, 6, 7}]
//   a2 = row g:     s[16k + {8, 9, 12, 13}]   a3 = row g + 8: s[16k + {10, 11, 14, 15}]
template <int NS>
__device__ __forceinline__ void to_p_fragments(const float (&s)[NS], uint32_t (&pa)[NS / 4]) {
#pragma unroll
  for (int k = 0; k < NS / 16; ++k) {
    const float *x = s + 16 * k;
    pa[4 * k + 0] = pack4_e4m3(x[0], x[1], x[4], x[5]);
    pa[4 * k + 1] = pack4_e4m3(x[2], x[3], x[6], x[7]);
    pa[4 * k + 2] = pack4_e4m3(x[8], x[9], x[12], x[13]);
    pa[4 * k + 3] = pack4_e4m3(x[10], x[11], x[14], x[15]);
  }
}

// Folds a block of raw scores into the exact running max m and the sum l: s becomes
// p' = exp2(s * scale_log2 - (m * scale_log2 - 8)), alpha = exp2((m_old - m) * scale_log2) rescales O.
// A row with no visible key so far keeps m = -inf (its p' are 0: base 0, s = -inf).
template <int NS>
__device__ __forceinline__ void softmax_update_fp8(float (&s)[NS], float (&m)[2], float (&l)[2], float (&alpha)[2],
                                                   float scale_log2) {
  float mx[2][2] = {{m[0], m[0]}, {m[1], m[1]}};
#pragma unroll
  for (int i = 0; i < NS; ++i) mx[acc_half(i)][acc_group(i) & 1] = fmaxf(mx[acc_half(i)][acc_group(i) & 1], s[i]);
  float base[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float m_new = quad_max(fmaxf(mx[r][0], mx[r][1]));
    base[r] = m_new == -INFINITY ? 0.f : m_new * scale_log2 - kPOffsetLog2;
    alpha[r] = m[r] == -INFINITY ? 0.f : exp2f((m[r] - m_new) * scale_log2);
    m[r] = m_new;
  }
  float sum[2];
  exponentiate(s, base, scale_log2, sum);
#pragma unroll
  for (int r = 0; r < 2; ++r) l[r] = l[r] * alpha[r] + sum[r];
}

template <class Cfg>
struct Consumer {
  static constexpr int BN = Cfg::BN, D = Cfg::D;
  const FwdFp8Params &p;
  Barriers bars;
  uint8_t *smem;
  int wg, lane, warp;
  uint64_t q_desc, k_desc0, v_desc0;
  int end0, end1;      // causal: the keys each of this thread's two rows sees are [0, end)
  float scale_log2;    // softmax scale * q_descale * k_descale * log2 e (this tile's)
  float o[D / 2], m[2], l[2];
  PipeState<Cfg::STAGES> ks, vs;

  __device__ __forceinline__ void turn_wait() { named_barrier_sync(kTurnBarrier + wg, 256); }
  __device__ __forceinline__ void turn_pass() { named_barrier_arrive(kTurnBarrier + (wg + 1) % Cfg::NWG, 256); }
  __device__ __forceinline__ void release(uint64_t *empty, int stage) {
    if (lane == 0) mbar_arrive(empty + stage);
  }
  __device__ __forceinline__ void issue_qk(float (&s)[BN / 2]) {
    mbar_wait(bars.full_k + ks.stage, ks.phase);
    wgmma_fence();
    gemm_qk<Cfg>(s, q_desc, desc_advance(k_desc0, ks.stage * Cfg::KV_BYTES));
    wgmma_commit();
  }
  __device__ __forceinline__ void issue_pv(const uint32_t (&pa)[BN / 8]) {
    mbar_wait(bars.full_v + vs.stage, vs.phase);
    wgmma_fence();
    gemm_pv<Cfg>(o, pa, desc_advance(v_desc0, vs.stage * Cfg::KV_BYTES));
    wgmma_commit();
  }
  // Scores at or past a row's end (the causal diagonal or the end of the keys) become -inf.
  __device__ __forceinline__ void mask(float (&s)[BN / 2], int n_block) {
    const int first_col = n_block * BN + 2 * (lane % 4);
#pragma unroll
    for (int i = 0; i < BN / 2; ++i)
      if (first_col + acc_col(i) >= (acc_half(i) ? end1 : end0)) s[i] = -INFINITY;
  }
  __device__ __forceinline__ void softmax(float (&s)[BN / 2], int n_block, bool masked, float (&alpha)[2]) {
    if (masked) mask(s, n_block);
    softmax_update_fp8(s, m, l, alpha, scale_log2);
  }

  // FA3 Algorithm 2 as the bf16 kernel: S_{j-1} = Q K_{j-1}^T and P_j V_j in flight together, the
  // softmax of S_{j-1} under P_j V_j; the two warpgroups' GEMM issues take turns.
  __device__ __forceinline__ void mainloop(BlockRange range) {
    float s[BN / 2], alpha[2];
    uint32_t pa[BN / 8];
    int n_block = range.n_end - 1;
    turn_wait();
    issue_qk(s);
    turn_pass();
    wgmma_wait<0>();
    fence_operands(s);
    release(bars.empty_k, ks.stage);
    ks.advance();
    softmax(s, n_block, n_block >= range.full_end, alpha);
    to_p_fragments(s, pa);
    for (--n_block; n_block >= 0; --n_block) {
      turn_wait();
      fence_operands(o);
      fence_operands(pa);
      issue_qk(s);
      issue_pv(pa);
      turn_pass();
      wgmma_wait<1>();
      fence_operands(s);
      release(bars.empty_k, ks.stage);
      ks.advance();
      softmax(s, n_block, n_block >= range.full_end, alpha);
      wgmma_wait<0>();
      fence_operands(o);
      fence_operands(pa);
      release(bars.empty_v, vs.stage);
      vs.advance();
      rescale_rows(o, alpha);
      to_p_fragments(s, pa);
    }
    release(bars.empty_q, 0);  // every S = Q K^T of the tile has completed
    turn_wait();
    fence_operands(o);
    fence_operands(pa);
    issue_pv(pa);
    turn_pass();
    wgmma_wait<0>();
    fence_operands(o);
    release(bars.empty_v, vs.stage);
    vs.advance();
  }

  // O * v_descale / l to the output dtype, straight from the registers: thread (g, q) holds columns
  // 8j + 2q, 8j + 2q + 1 of rows g and g + 8 (one 4-byte store each); LSE = m * scale + ln(l) - 8 ln 2.
  __device__ __forceinline__ void epilogue(const Tile &tile, int row0, float v_descale, float scale) {
    float inv[2], lse[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float total = quad_sum(l[r]);
      const bool empty = !(total > 0.f);  // a row that saw no key (or NaN): O = 0, LSE = -inf
      inv[r] = empty ? 0.f : v_descale / total;
      lse[r] = empty ? -INFINITY : m[r] * scale + logf(total) - kPOffsetLog2 * 0.69314718055994531f;
    }
    const int col0 = 2 * (lane % 4);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = row0 + 8 * r;
      if (row >= p.seqlen_q) continue;
      const int64_t base = int64_t(tile.b) * p.o_batch + int64_t(row) * p.o_seq + int64_t(tile.h) * p.o_head;
      uint32_t *dst = reinterpret_cast<uint32_t *>(static_cast<uint16_t *>(p.o) + base);
#pragma unroll
      for (int j = 0; j < D / 8; ++j) {
        const int col = 8 * j + col0;
        if (col >= p.head_dim) break;
        const float a = o[4 * j + 2 * r] * inv[r], b = o[4 * j + 2 * r + 1] * inv[r];
        dst[col / 2] = p.o_bf16 ? pack2<__nv_bfloat16>(a, b) : pack2<__half>(a, b);
      }
    }
    if (p.lse != nullptr && (lane & 3) == 0) {
      const int64_t base = (int64_t(tile.b) * p.heads_q + tile.h) * p.seqlen_q;
#pragma unroll
      for (int r = 0; r < 2; ++r)
        if (row0 + 8 * r < p.seqlen_q) p.lse[base + row0 + 8 * r] = lse[r];
    }
  }
};

template <class Cfg>
__device__ __forceinline__ void consumer(const FwdFp8Params &p, uint8_t *smem, Barriers bars, int wg) {
  Consumer<Cfg> c{p, bars, smem};
  const int t = threadIdx.x % 128;
  c.wg = wg, c.lane = t % 32, c.warp = t / 32;
  c.q_desc = make_smem_desc(smem_addr(smem + Cfg::Q_OFF) + wg * 64 * 128, 16, 1024);
  c.k_desc0 = make_smem_desc(smem_addr(smem + Cfg::K_OFF), 16, 1024);
  c.v_desc0 = make_smem_desc(smem_addr(smem + Cfg::V_OFF), 16, 1024);
  if (wg == Cfg::NWG - 1) named_barrier_arrive(kTurnBarrier, 256);  // group 0 first
  uint32_t q_parity = 0;
  const float log2e = 1.44269504088896341f;
  for (int round = 0; round * int(gridDim.x) < p.num_tiles; ++round) {
    const int tile_idx = tile_position(round);
    if (tile_idx >= p.num_tiles) continue;
    const Tile tile = decode_tile(p, tile_idx);
    const int hk = tile.h / p.group;
    // A descale of 0 (an all-zero tensor's amax scale) makes every score 0; the floor keeps
    // -inf * scale (masked scores) at -inf instead of NaN, and leaves finite scores at ~0.
    const float scale = fmaxf(p.scale * descale_of(p.q_descale, p.qd_stride, tile.b, hk) *
                                  descale_of(p.k_descale, p.kd_stride, tile.b, hk),
                              1e-30f);
    c.scale_log2 = scale * log2e;
    const BlockRange range = tile_range(p, tile.m_block, Cfg::BM, Cfg::BN);
    const int row0 = tile.m_block * Cfg::BM + wg * 64 + c.warp * 16 + c.lane / 4;
    const int shift = p.seqlen_k - p.seqlen_q;
    c.end0 = p.causal ? min(p.seqlen_k, row0 + shift + 1) : p.seqlen_k;
    c.end1 = p.causal ? min(p.seqlen_k, row0 + 8 + shift + 1) : p.seqlen_k;
#pragma unroll
    for (int i = 0; i < Cfg::D / 2; ++i) c.o[i] = 0.f;
    c.m[0] = c.m[1] = -INFINITY;
    c.l[0] = c.l[1] = 0.f;
    mbar_wait(bars.full_q, q_parity);
    q_parity ^= 1;
    if (range.n_end > 0) {
      c.mainloop(range);
    } else {
      c.release(bars.empty_q, 0);
    }
    c.epilogue(tile, row0, descale_of(p.v_descale, p.vd_stride, tile.b, hk), scale);
  }
}

template <class Cfg>
__global__ void __launch_bounds__(Cfg::THREADS, 1) flash_fwd_sm90_fp8_kernel(const __grid_constant__ FwdFp8Params p) {
  extern __shared__ uint8_t smem_raw[];
  uint8_t *smem = reinterpret_cast<uint8_t *>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  // Q is free once every consumer warp has seen the tile's last S = Q K^T (O leaves from registers).
  const Barriers bars =
      setup_barriers<Cfg::STAGES, Cfg::NWG>(reinterpret_cast<uint64_t *>(smem + Cfg::BAR_OFF), 4 * Cfg::NWG);
  split_roles<Cfg::PRODUCER_REGS, Cfg::CONSUMER_REGS>([&] { producer<Cfg>(p, smem, bars); },
                                                      [&](int wg) { consumer<Cfg>(p, smem, bars, wg); });
}

}  // namespace flashbox::sm90::fp8
