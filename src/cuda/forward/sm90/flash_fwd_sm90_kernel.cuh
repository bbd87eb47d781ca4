// FlashAttention forward for Hopper (sm_90a): TMA + mbarrier ring + wgmma + warp specialisation.
//
// A work tile is BM = 64 * NWG query rows of one (batch, head); a CTA walks the K/V blocks the tile
// may see from the last one down (FA3 paper §3, Algorithm 1; docs/hopper.md):
//   warpgroup 0, the producer: drops to a few registers (setmaxnreg) and one thread issues TMA loads:
//     Q, then K_j and V_j into two STAGES-deep rings of 128B-swizzled shared-memory tiles, ordered
//     K_0, (K_1, V_0), (K_2, V_1), ... so that the next S never waits behind the current V.
//   warpgroups 1..NWG, the consumers: 64 query rows each; S = Q K_j^T by wgmma from shared memory
//     (SS), or with QREG (head_dim 128, 128 x 128 tiles) with this group's Q rows loaded once per
//     tile into registers (ldmatrix) as the A operand (RS: K is the only shared-memory read);
//     online softmax in registers (exp2, softmax_scale * log2 e folded into one FFMA), P packed to
//     16 bits in registers as the A operand of O += P V_j (RS). Blocks after a tile's first
//     skip the block's row max (optimistic: exponentials against the running max, accepted when no
//     p exceeds 2^12, else the warp recomputes its scores with mma.sync and takes the exact path),
//     so K is released only after the softmax. The softmax of block j runs while the P.V product of
//     block j-1 is in flight (FA3 §3.2), and the GEMM issue of the consumer warpgroups takes turns
//     through named barriers (ping-pong) so one group's softmax hides under the other's GEMMs (FA3
//     §3.1).
//   Epilogue: O / l goes through shared memory (stmatrix) and out by a TMA store, which clips rows
//     >= seqlen_q; LSE (natural log) straight from registers. A learnable sink joins the row's max
//     and sum here (Consumer::finalize_with_sink; every configuration, at run time). O is staged
//     either in the warpgroup's own Q rows (Q is then free only once the store has read them) or,
//     with `separate_o` (when the shared memory has room), in an O buffer of its own: Q is released
//     right after the tile's last S = Q K^T, so the next tile's Q loads under the last P.V and the
//     epilogue, and the store's read of the O buffer is waited for only before the next epilogue
//     writes it.
// Scheduling: one tile per CTA (grid = all tiles, head by head, longest query block first), or
// persistent (grid = SMs; each CTA walks tiles in a snake over rounds of the longest-first order cut
// into L2-sized head sections). The rings' (stage, parity) and the ping-pong turns run on across a
// CTA's tiles; every warpgroup of a CTA sees the same tiles, so all agree on the counts. Tiles,
// walks and block ranges: flash_fwd_sm90_tiles.cuh.
// Head dims: D is the instantiation's (64, 96, 128, 192, 256; 96 is FwdConfig's note below: Q and K
// padded to two 64-column panels, V in three 32-column ones); a call's head_dim may be any multiple
// of 8 up to D (flash_fwd_sm90.cu): the tensor maps end at head_dim, so the TMA fills the columns past it
// with zeros on loads and clips them on stores; only the varlen partial-slice store below, which does
// not go through the TMA, needs p.head_dim_v. A tile row is D / 64 swizzled 64-column panels (PANELS:
// three for 192); S = Q K^T walks D / 16 k-steps, four per panel; O += P V is one N = DV product per
// k-step up to 192 and two N = 128 halves at 256 (gemm_pv). head_dim 192 (128 x 112)
// exists because 136..192 on the 256 kernel did a third more work than needed: its 112-key block is
// what the shared memory allows (Q 48 KB + two stages of K and V at 42 KB each = 216 KB; 128 keys
// would need 240 KB), and O 96 + S 56 + P 28 registers per thread fit where the 256 kernel's
// 128 + 32 + 16 do.
// V's and O's head dim DV (FwdConfig; D but for the pairs of tile_policy.hpp's kDvKernels): V's ring
// stages (V_STAGE_BYTES), the P.V product's N, the O accumulator (DV / 2 floats per thread), the
// staging and the stores (O_PANELS) are DV wide; Q, K and S = Q K^T stay D wide. (192, 128),
// DeepSeek's prefill, runs 128 x 128: K 48 KB + V 32 KB a stage, Q 48 KB, 208 KB in all; O 64 + S 64 +
// P 32 registers per thread; O staged in Q's first two panels. The call's head_dim_v (any multiple of
// 8 up to DV) bounds the V and O maps, as head_dim bounds Q's and K's.
// Variable-length batches (cu_seqlens; the 64, 96 and 128 instantiations): the same kernels with run-time fields.
// Tiles come from a list the device builds before the launch (flash_fwd_sm90_varlen.cu: (sequence,
// query block, head) tiles, longest work first, head by head within equal work), always on the
// persistent grid; a tile's
// TMA rows start at its sequence's first query / key token in the packed tensors, its masks and
// LSE use the sequence's own lengths, and a 64-row slice that the sequence ends inside is copied from
// its shared-memory staging to global memory row by row (the TMA box would write the next
// sequence's rows). Keys a box reads past the sequence's end are masked like keys past seqlen_k.
// Masks (cuda/common/score_mods.cuh, core/masks.hpp): causal and the sliding window are bottom-right
// aligned and runtime parameters of every configuration: a tile walks only the K/V blocks its rows can
// see, and only blocks that cross a window edge (the causal diagonal is the right edge) or the end of
// the keys are masked, so a window costs nothing where it hides keys. The extension's mask families
// (MaskExtConfig: document ids, prefix-LM, attention_chunk, seqused, block masks and a mask mod's bit
// tiles in their partial blocks) walk the tiles mask_walk.cuh lists instead (mainloop_ext), each with
// the need that walk assigns it. Softcap and ALiBi change every score and are compiled in only with MODS (the default tile of each head_dim, flash_fwd_sm90_d*.cu):
// the scores are transformed before the mask and the online softmax; with a softcap they stay in
// units of the cap (tanh's output), and the softmax and LSE use cap where they used the scale.
// Each consumer warpgroup (head_dim 64 and 128) walks only the blocks of the tile's walk that its own
// 64 rows see (group_range): a 192-row tile's window edges and causal diagonal span two or three
// 128-key blocks, and a group skips the ones it does not see (their tensor-core turn and ring stages
// are passed on, so the ping-pong and the rings stay in step); its masks follow its own rows. The
// masked-out pairs a window's edge blocks computed were most of its cost at head_dim 64: +9 % for a
// causal window of 1024, +7 % two-sided (docs/perf-history.md, sm90 forward v11, which also has what was
// tried and dropped: P.V over half a block, S over half a block).
#pragma once
#include <cuda.h>
#include <cstdint>

#include "cuda/common/ldmatrix.cuh"
#include "cuda/common/mma.cuh"
#include "cuda/common/score_mods.cuh"
#include "cuda/common/sink.cuh"
#include "cuda/common/varlen_span.cuh"
#include "cuda/forward/sm90/flash_fwd_sm90_config.cuh"
#include "cuda/forward/sm90/flash_fwd_sm90_tiles.cuh"
#include "cuda/forward/sm90/mask_walk.cuh"
#include "cuda/hopper/async_copy.cuh"
#include "cuda/hopper/online_softmax.cuh"
#include "cuda/hopper/tma_host.hpp"
#include "cuda/hopper/wgmma.cuh"

namespace flashbox::sm90 {

// O is rescaled only when a row max grows past 2^8 in p (exact: l, O and the LSE share the stale max).
constexpr float kLazyRescaleLog2 = 8.f;

// Named barriers: 0 is __syncthreads; 1..NWG the ping-pong turns; then one per consumer epilogue.
constexpr int kPingPongBarrier = 1;
constexpr int kEpilogueBarrier = 5;

// One thread: for every tile of this CTA, the first K block, Q once its buffer is free (the previous
// tile's O has left it), then the other K/V blocks; the rings' (stage, parity) run on across tiles.
template <class Cfg>
__device__ __forceinline__ void producer(const FwdParams &p, uint8_t *smem, Barriers bars) {
  tma_prefetch_map(&p.tm_q);
  tma_prefetch_map(&p.tm_k);
  tma_prefetch_map(&p.tm_v);
  uint32_t ks = 0, vs = 0;  // K and V loads issued so far: ring stage and parity follow from them
  // n_block counts from the sequence's first key k0 (varlen; 0 for fixed length), so rows past the
  // sequence's end that a box reads belong to the next sequence: they are masked as keys (the mask
  // ends at sk) and their V rows meet p = 0.
  // is_v: V's panels, which differ from K's at head_dim 96 (V_PANELS of V_COLS = 32 columns) and
  // where DV != D (V_PANELS of 64 columns, stages of V_STAGE_BYTES).
  const auto load_kv = [&](int off, const CUtensorMap *map, TmaOrder ord, uint64_t *full, uint64_t *empty,
                           uint32_t &uses, int n_block, int hk, const Tile &tile, bool is_v) {
    const uint32_t stage = uses % Cfg::STAGES, phase = (uses / Cfg::STAGES) & 1;
    mbar_wait(empty + stage, phase ^ 1);
    if constexpr (Cfg::V_COLS != 64 || Cfg::DV != Cfg::D) {
      if (is_v) {
        mbar_expect_tx_arrive(full + stage, Cfg::V_BYTES);
        load_tile<Cfg::V_PANELS, Cfg::V_COLS>(smem + off + stage * Cfg::V_STAGE_BYTES, Cfg::BN * Cfg::V_ROW_BYTES, map,
                                              ord, full + stage, tile.k0 + n_block * Cfg::BN, hk, tma_batch(p, tile));
        ++uses;
        return;
      }
    }
    mbar_expect_tx_arrive(full + stage, Cfg::KV_BYTES);
    load_tile<Cfg::PANELS>(smem + off + stage * Cfg::KV_BYTES, Cfg::BN * 128, map, ord, full + stage,
                           tile.k0 + n_block * Cfg::BN, hk, tma_batch(p, tile));
    ++uses;
  };
  // Few registers here (setmaxnreg): the Q-buffer parity follows from `round`, which counts this
  // CTA's tiles (only the last round can skip one).
  const int num_tiles = tiles_to_walk(p);
  for (int round = 0; round * int(gridDim.x) < num_tiles; ++round) {
    const int t = tile_position(round);
    if (t >= num_tiles) continue;
    const Tile tile = decode_tile_of<Cfg>(p, t);
    if constexpr (Cfg::EXT) {
      // The walk's tiles in its order, K one tile ahead of V as below; Q after the first K.
      const ExtWalk w = tile_walk<Cfg>(p, tile);
      const int hk = tile.h / p.group;
      int kind, n_prev = 0;
      if (w.count > 0) {
        n_prev = ext_walk_tile(p.ext, w, 0, Cfg::BN, tile.sk, &kind);
        load_kv(Cfg::K_OFF, &p.tm_k, p.ord_k, bars.full_k, bars.empty_k, ks, n_prev, hk, tile, false);
      }
      mbar_wait(bars.empty_q, (round & 1) ^ 1);
      mbar_expect_tx_arrive(bars.full_q, Cfg::Q_BYTES);
      load_tile<Cfg::PANELS>(smem + Cfg::Q_OFF, Cfg::BM * 128, &p.tm_q, p.ord_q, bars.full_q,
                             tile.q0 + tile.m_block * Cfg::BM, tile.h, tma_batch(p, tile));
      if (w.count == 0) continue;
      for (int i = 1; i < w.count; ++i) {
        const int n = ext_walk_tile(p.ext, w, i, Cfg::BN, tile.sk, &kind);
        load_kv(Cfg::K_OFF, &p.tm_k, p.ord_k, bars.full_k, bars.empty_k, ks, n, hk, tile, false);
        load_kv(Cfg::V_OFF, &p.tm_v, p.ord_v, bars.full_v, bars.empty_v, vs, n_prev, hk, tile, true);
        n_prev = n;
      }
      load_kv(Cfg::V_OFF, &p.tm_v, p.ord_v, bars.full_v, bars.empty_v, vs, n_prev, hk, tile, true);
      continue;
    }
    const BlockRange range = block_range(p.mods, tile.m_block, Cfg::BM, Cfg::BN, tile.sq, tile.sk);
    const int hk = tile.h / p.group, last = range.n_end - 1;
    // The first K block may land while the consumers still write out the previous tile.
    if (range.count() > 0) load_kv(Cfg::K_OFF, &p.tm_k, p.ord_k, bars.full_k, bars.empty_k, ks, last, hk, tile, false);
    // Q goes out for every tile, even one that sees no key: the consumers then wait for it every
    // tile, cannot run ahead, and neither empty_q nor full_q ever falls two phases behind.
    // >>> report:load_q
    mbar_wait(bars.empty_q, (round & 1) ^ 1);  // the first wait passes on the fresh barrier
    mbar_expect_tx_arrive(bars.full_q, Cfg::Q_BYTES);
    load_tile<Cfg::PANELS>(smem + Cfg::Q_OFF, Cfg::BM * 128, &p.tm_q, p.ord_q, bars.full_q,
                           tile.q0 + tile.m_block * Cfg::BM, tile.h, tma_batch(p, tile));
    // <<< report:load_q
    if (range.count() == 0) continue;
    // >>> report:kv_loop
    for (int i = 1; i < range.count(); ++i) {
      load_kv(Cfg::K_OFF, &p.tm_k, p.ord_k, bars.full_k, bars.empty_k, ks, last - i, hk, tile, false);
      load_kv(Cfg::V_OFF, &p.tm_v, p.ord_v, bars.full_v, bars.empty_v, vs, last - i + 1, hk, tile, true);
    }
    load_kv(Cfg::V_OFF, &p.tm_v, p.ord_v, bars.full_v, bars.empty_v, vs, range.n_begin, hk, tile, true);
    // <<< report:kv_loop
  }
}

// >>> report:s_tile
// S = Q K^T for this warpgroup's 64 rows: D/16 k-steps over K-major Q and K tiles.
template <class Cfg>
__device__ __forceinline__ void gemm_qk(float (&s)[Cfg::BN / 2], uint64_t q_desc, uint64_t k_desc) {
#pragma unroll
  for (int k = 0; k < Cfg::D / 16; ++k) {
    const uint32_t a_off = (k / 4) * Cfg::BM * 128 + (k % 4) * 32;
    const uint32_t b_off = (k / 4) * Cfg::BN * 128 + (k % 4) * 32;
    wgmma_ss<Cfg::BN, typename Cfg::Elem>(s, desc_advance(q_desc, a_off), desc_advance(k_desc, b_off), k > 0);
  }
}

// The same product with this warpgroup's Q rows in registers (ldmatrix fragments, qa).
template <class Cfg>
__device__ __forceinline__ void gemm_qk_rs(float (&s)[Cfg::BN / 2], const uint32_t (&qa)[Cfg::D / 4], uint64_t k_desc) {
#pragma unroll
  for (int k = 0; k < Cfg::D / 16; ++k) {
    const uint32_t b_off = (k / 4) * Cfg::BN * 128 + (k % 4) * 32;
    wgmma_rs<Cfg::BN, typename Cfg::Elem, false>(s, reinterpret_cast<const uint32_t(&)[4]>(qa[4 * k]),
                                                 desc_advance(k_desc, b_off), k > 0);
  }
}
// <<< report:s_tile

// >>> report:pv
// O += P V: BN/16 k-steps, P from registers, V an N-major (DV-contiguous) tile. DV 64, 96, 128 and
// 192 are one product of N = DV per k-step (N = 192 spans V's three 64-column panels, N = 96 its
// three 32-column ones, LBO = one panel; a k-step is 16 rows of V_ROW_BYTES); DV 256 is two
// N = 128 products per k-step, one per half of O's columns (the accumulator of N = 256 is the two
// N = 128 accumulators one after the other; V's columns 128.. start two 64-column panels in).
template <class Cfg>
__device__ __forceinline__ void gemm_pv(float (&o)[Cfg::DV / 2], const uint32_t (&pa)[Cfg::BN / 4], uint64_t v_desc) {
  constexpr int N = Cfg::DV == 256 ? 128 : Cfg::DV;
#pragma unroll
  for (int k = 0; k < Cfg::BN / 16; ++k)
#pragma unroll
    for (int h = 0; h < Cfg::DV / N; ++h)
      wgmma_rs<N, typename Cfg::Elem>(reinterpret_cast<float(&)[N / 2]>(o[h * N / 2]),
                                      reinterpret_cast<const uint32_t(&)[4]>(pa[4 * k]),
                                      desc_advance(v_desc, k * 16 * Cfg::V_ROW_BYTES + h * (N / 64) * Cfg::BN * 128), 1);
}
// <<< report:pv

// Per-consumer-warpgroup state and steps of the main loop.
template <class Cfg>
struct Consumer {
  static constexpr int BN = Cfg::BN, D = Cfg::D, DV = Cfg::DV, NWG = Cfg::NWG;
  const FwdParams &p;
  Barriers bars;
  uint8_t *smem;
  int wg, lane, warp;
  uint64_t q_desc, k_desc0, v_desc0;
  int begin0, end0, begin1, end1;     // the keys each of this thread's two rows sees: [begin, end)
  float alibi_d0, slope;              // MODS: row0 + shift as a float, ALiBi slope in score units (0: off)
  float mods_scale, mods_scale_log2;  // MODS: the unit of a score (scale, or cap with softcap), times log2 e
  float sink2;  // kSinkAtTileStart: the tile's learnable sink times log2 e, read at the tile's start
  static constexpr bool kSinkAtTileStart = !Cfg::MODS && !Cfg::EXT;  // why: tile_sink2
  float o[DV / 2], m[2], l[2];
  uint32_t qa[Cfg::QREG ? D / 4 : 4];  // Q fragments (QREG)
  PipeState<Cfg::STAGES> ks, vs;       // run on across tiles, like the producer's
  // EXT: the used key count, the prefix length, the batch entry and this thread's two rows clamped to
  // the used ones (where its document ids are read: with documents, ext_classify reads them again per
  // tile rather than holding them, which kept the head_dim 128 kernel's spills down, ptxas -v), the
  // current tile's need (mask_walk.cuh, warp-uniform) and, for the element rule, which of this
  // thread's 32 columns hold a key of each row's document (bit 2 * (i / 4) + i % 2 for score i).
  int ext_sk, ext_prefix, ext_b, ext_row0, ext_row1, ext_need;
  uint32_t ext_match0, ext_match1;

  __device__ __forceinline__ void turn_wait() { named_barrier_sync(kPingPongBarrier + wg, 256); }
  __device__ __forceinline__ void turn_pass() { named_barrier_arrive(kPingPongBarrier + (wg + 1) % NWG, 256); }
  __device__ __forceinline__ void release(uint64_t *empty, int stage) {
    if (lane == 0) mbar_arrive(empty + stage);  // one arrival per warp, after its wgmma wait
  }
  // With a separate O buffer, Q is free once the tile's last S = Q K^T has completed (every warp;
  // called once per tile, after the main loop's last wait on a Q K^T product).
  __device__ __forceinline__ void release_q() {
    if (Cfg::O_FITS && p.separate_o) release(bars.empty_q, 0);
  }
  __device__ __forceinline__ void issue_qk(float (&s)[BN / 2], PipeState<Cfg::STAGES> ks) {
    mbar_wait(bars.full_k + ks.stage, ks.phase);
    wgmma_fence();
    if constexpr (Cfg::QREG)
      gemm_qk_rs<Cfg>(s, qa, desc_advance(k_desc0, ks.stage * Cfg::KV_BYTES));
    else
      gemm_qk<Cfg>(s, q_desc, desc_advance(k_desc0, ks.stage * Cfg::KV_BYTES));
    wgmma_commit();
  }
  __device__ __forceinline__ void issue_pv(const uint32_t (&pa)[BN / 4], PipeState<Cfg::STAGES> vs) {
    mbar_wait(bars.full_v + vs.stage, vs.phase);
    wgmma_fence();
    gemm_pv<Cfg>(o, pa, desc_advance(v_desc0, vs.stage * Cfg::V_STAGE_BYTES));
    wgmma_commit();
  }
  // Masks (when the block needs it) and folds the scores of K/V block n_block into m, l. An unmasked
  // block after the tile's first (`later`; lazy rescaling) goes the optimistic way, without the
  // block's max; where that is refused, this warp recomputes its scores from Q and the block's K
  // tile (still held: the caller releases K after this) and takes the exact path.
  // >>> report:online_softmax
  __device__ __forceinline__ void softmax(float (&s)[BN / 2], int n_block, bool masked, float (&alpha)[2],
                                          bool later = false, int k_stage = 0) {
    if constexpr (Cfg::CAP_FUSED) {
      // Softcap alone on an unmasked later block: the tanh inside the exponentials' loop rather than
      // in a pass of its own before it (transform_scores), so that ptxas can interleave each score's
      // FFMA, exp2 and sum with the other scores' tanh instead of 64 MUFU.TANH in a row, then 64
      // MUFU.EX2 (the two MUFU ops per score are the softmax's critical path here).
      if (later && !masked && p.mods.softcap > 0.f && slope == 0.f &&
          __all_sync(0xffffffffu, m[0] != -INFINITY && m[1] != -INFINITY)) {
        const float cap_pre = p.cap_pre;
        const auto capped = [cap_pre](float x) { return cuda::tanh_approx(x * cap_pre); };
        if (softmax_update_optimistic(s, m, l, alpha, score_scale_log2(), capped)) return;
        recompute_scores(s, k_stage);
        transform_scores(s, n_block);
        softmax_update(s, m, l, alpha, score_scale_log2(), kLazyRescaleLog2);
        return;
      }
    }
    transform_scores(s, n_block);
    if (masked) mask(s, n_block);
    // Masked blocks after the first go the optimistic way too (a window's edge blocks, the causal
    // diagonal's second block), but only where every row of the warp has a finite max already: a
    // row that has seen no key would refuse it anyway, after a wasted exponentiation and recompute.
    if (later && __all_sync(0xffffffffu, m[0] != -INFINITY && m[1] != -INFINITY)) {
      if (softmax_update_optimistic(s, m, l, alpha, score_scale_log2())) return;
      recompute_scores(s, k_stage);
      transform_scores(s, n_block);
      if (masked) mask(s, n_block);
    }
    softmax_update(s, m, l, alpha, score_scale_log2(), kLazyRescaleLog2);
  }

  // What one unit of a score is in natural log units (and times log2 e): the softmax scale, or with a
  // softcap (MODS) the cap. The plain configurations read the parameters, not a register.
  __device__ __forceinline__ float score_scale() const { return Cfg::MODS ? mods_scale : p.scale; }
  __device__ __forceinline__ float score_scale_log2() const { return Cfg::MODS ? mods_scale_log2 : p.scale_log2; }

  __device__ __forceinline__ void mask(float (&s)[BN / 2], int n_block) {
    const int first_col = n_block * BN + 2 * (lane % 4);
    if constexpr (Cfg::EXT) {
      mask_ext(s, first_col);
    } else {
      mask_window(s, begin0 - first_col, end0 - first_col, begin1 - first_col, end1 - first_col);
    }
  }

  // EXT: the tile's need (ext_classify) applied to this thread's scores (flash_fwd_sm90_tiles.cuh).
  __device__ __forceinline__ void mask_ext(float (&s)[BN / 2], int first_col) {
    ext_mask_scores(s, ext_need, first_col, ext_sk, ext_prefix, ext_match0, ext_match1, begin0, end0, begin1, end1);
  }

  // EXT: this tile's rows' bounds, prefix and documents (row0: this thread's first row; t.sq > 0
  // wherever a tile is walked, and rows past it read the last row's id: their results are never
  // stored).
  __device__ __forceinline__ void ext_setup(const Tile &t, int row0) {
    const int sk = t.sk, shift = sk - t.sq;
    begin0 = cuda::ext_key_begin(p.mods, p.ext, row0, shift, sk);
    end0 = cuda::ext_key_end(p.mods, p.ext, row0, shift, sk);
    begin1 = cuda::ext_key_begin(p.mods, p.ext, row0 + 8, shift, sk);
    end1 = cuda::ext_key_end(p.mods, p.ext, row0 + 8, shift, sk);
    ext_sk = sk;
    ext_prefix = cuda::ext_prefix(p.ext, t.b, sk);
    ext_b = t.b;
    ext_row0 = max(min(row0, t.sq - 1), 0), ext_row1 = max(min(row0 + 8, t.sq - 1), 0);
  }

  // EXT: what tile n (of kind `kind`, iteration `it` of the walk w) needs of the mask, the largest
  // need over the warp's rows, and the rows' document and mask-mod bits for the element rule
  // (flash_fwd_sm90_tiles.cuh, ext_classify_tile). A block walk's rule tile is a partial entry's:
  // with a mod, its bit tile (entry it / tiles_per_block; the tile row of the block mask's row, its
  // rows from the mask block's first) at this thread's first row (row0) and the tile's first key.
  // The tile (tile_idx) is decoded again for it rather than its row held through the loop: nothing
  // more lives across the products.
  __device__ __forceinline__ void ext_classify(const ExtWalk &w, int it, int n, int kind, int tile_idx, int row0) {
    const uint32_t *mod = nullptr;
    if (p.ext.mod_bits != nullptr && w.tiles_per_block > 0 && kind == kTileRule) {
      const Tile t = decode_tile(p, tile_idx);
      mod = ext_mod_row(p.ext, w, it, kind, t.b, t.h, t.m_block * Cfg::BM, row0, BN);
    }
    ext_need = ext_classify_tile<BN>(p, n, kind, lane, ext_sk, ext_prefix, ext_b, ext_row0, ext_row1, begin0, end0,
                                     begin1, end1, mod, p.ext.kv_block / 32, ext_match0, ext_match1);
  }

  // EXT: V rows of tile n past the sequence's used keys but inside the tensor (rows past seqused_k,
  // or the next sequence's with varlen) hold whatever is there (the TMA zero-fills only past the
  // tensor's end, seqlen_k or total_k): zeroed before this group's P.V reads the stage, so that a
  // non-finite value cannot meet p = 0.
  __device__ __forceinline__ void ext_zero_v(int n) {
    if (n * BN >= ext_sk || (n + 1) * BN <= ext_sk) return;
    const int k0 = p.cu_q != nullptr ? cuda::span_clamp(p.cu_k[ext_b], 0, p.total_k) : 0;
    if (k0 + ext_sk < p.seqlen_k) zero_v_rows(vs.stage, ext_sk - n * BN);
  }

  // MODS: softcap, then the ALiBi bias, in score units (before the mask, which sets -inf last).
  // tanh.approx.f32 (one MUFU op, relative error ~2^-11): the accuracy is measured against the fp64
  // reference in tests/sm90/sm90_mods_test.cpp. The tanh shares the MUFU with exp2 (docs/perf-history.md:
  // what that costs, and half of the exponentials on the FMA pipe instead, measured slower).
  __device__ __forceinline__ void transform_scores(float (&s)[BN / 2], int n_block) {
    if constexpr (Cfg::MODS) {
      if (p.mods.softcap > 0.f) {
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) s[i] = cuda::tanh_approx(s[i] * p.cap_pre);
      }
      if (slope != 0.f) {
        // |i + shift - j| for row i and column j = n_block * BN + 2 (lane % 4) + acc_col(i).
        const float d0 = alibi_d0 - float(n_block * BN + 2 * (lane % 4));
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) s[i] = fmaf(-slope, fabsf(d0 + float(8 * acc_half(i) - acc_col(i))), s[i]);
      }
    }
  }
  // <<< report:online_softmax

  // This warp's 16 rows of S = Q K^T again, with mma.sync (its m16n8 accumulators are laid out as
  // the warp's slice of the wgmma accumulator): A from Q (the registers with QREG, else ldmatrix
  // from the Q tile), B by ldmatrix from the K tile of `k_stage`. The rare path of softmax(); the
  // P.V product in flight reads other registers.
  __device__ __forceinline__ void recompute_scores(float (&s)[BN / 2], int k_stage) {
    constexpr bool bf16 = is_bf16<typename Cfg::Elem>;
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) s[i] = 0.f;
    const int a_row = wg * 64 + warp * 16 + (lane & 15), a_col = 8 * (lane >> 4);
    const int b_row = (lane & 7) + 8 * (lane >> 4), b_col = 8 * ((lane >> 3) & 1);
    // Key rows 16 np + b_row share b_row's swizzle phase: the K address of (np, kk) is this lane's
    // address of (0, kk) plus np * 16 rows, an immediate offset.
    const uint32_t k_tile = smem_addr(smem + Cfg::K_OFF + k_stage * Cfg::KV_BYTES);
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t a[4];
      if constexpr (Cfg::QREG) {
#pragma unroll
        for (int e = 0; e < 4; ++e) a[e] = qa[4 * kk + e];
      } else {
        flashbox::cuda::ldmatrix_x4(a, swizzled_128b(smem_addr(smem + Cfg::Q_OFF), Cfg::BM, a_row, 16 * kk + a_col));
      }
      const uint32_t k_lane = swizzled_128b(k_tile, BN, b_row, 16 * kk + b_col);
#pragma unroll
      for (int np = 0; np < BN / 16; ++np) {
        uint32_t b[4];
        flashbox::cuda::ldmatrix_x4(b, k_lane + np * 16 * 128);
        flashbox::cuda::mma_m16n16k16<bf16>(reinterpret_cast<float(&)[4]>(s[8 * np]),
                                            reinterpret_cast<float(&)[4]>(s[8 * np + 4]), a, b);
      }
    }
  }

  // FA3 Algorithm 2: S_{j+1} and P_j V_j in flight together; softmax of S_{j+1} under P_j V_j.
  // Varlen: rows [from, BN) of the V stage hold the next sequence's values (the tile's first block
  // reaches past its sequence's end): zeroed before this group's first P.V so that a non-finite value
  // there cannot meet p = 0 (0 * Inf = NaN). Whole 128-byte rows, so the swizzle does not matter; the
  // other consumer group writes the same zeros (same values: its reads see zeros either way).
  __device__ __forceinline__ void zero_v_rows(int stage, int from) {
    mbar_wait(bars.full_v + stage, vs.phase);  // the TMA has written the stage
    uint8_t *tile = smem + Cfg::V_OFF + stage * Cfg::V_STAGE_BYTES;
    // 16-byte chunks per row of a V panel: 8 (128-byte rows) or 4 (head_dim 96's 64-byte rows).
    constexpr int RC = Cfg::V_ROW_BYTES / 16;
    const int rows = BN - from, chunks = rows * RC;
    for (int i = warp * 32 + lane; i < chunks * Cfg::V_PANELS; i += 128) {
      const int pnl = i / chunks, r = from + (i % chunks) / RC, c = i % RC;
      *reinterpret_cast<uint4 *>(tile + pnl * BN * Cfg::V_ROW_BYTES + r * Cfg::V_ROW_BYTES + c * 16) = make_uint4(0, 0, 0, 0);
    }
    fence_view_async_shared();
    named_barrier_sync(kEpilogueBarrier + wg, 128);
  }

  // A block of the tile's walk that none of this group's rows sees: its turn at the tensor cores
  // passes on (every group takes one turn per block, plus one, per tile, so the ping-pong stays in
  // step) and its K and V stages are released once they have landed (waiting for the data first
  // keeps this group's arrival in the stage's current phase: the producer refills a stage only after
  // every warp of every group has arrived).
  __device__ __forceinline__ void skip_block() {
    turn_wait();
    turn_pass();
    mbar_wait(bars.full_k + ks.stage, ks.phase);
    release(bars.empty_k, ks.stage);
    ks.advance();
    mbar_wait(bars.full_v + vs.stage, vs.phase);
    release(bars.empty_v, vs.stage);
    vs.advance();
  }

  // The tile's walk for this group: the blocks of `range` it sees (`own`, a sub-range) through the
  // main loop, the others skipped in their place in the walk (from the last block down).
  __device__ __forceinline__ void walk(BlockRange range, BlockRange own, int v_zero_from) {
    if (own.count() == 0) {  // a group whose rows see no key of the tile (or lie past seqlen_q)
      for (int n = range.n_end - 1; n >= range.n_begin; --n) skip_block();
      turn_wait();  // the turn of the tile's last P.V
      turn_pass();
      release_q();
      return;
    }
    for (int n = range.n_end - 1; n >= own.n_end; --n) skip_block();
    // The varlen zeroing concerns the tile's first block only: a group that skips it never reads it.
    mainloop(own, own.n_end == range.n_end ? v_zero_from : BN);
    for (int n = own.n_begin - 1; n >= range.n_begin; --n) skip_block();
  }

  __device__ __forceinline__ void mainloop(BlockRange range, int v_zero_from) {
    float s[BN / 2], alpha[2];
    uint32_t pa[BN / 4];
    int n_block = range.n_end - 1;
    turn_wait();
    issue_qk(s, ks);
    turn_pass();
    wgmma_wait<0>();
    fence_operands(s);
    release(bars.empty_k, ks.stage);
    ks.advance();
    softmax(s, n_block, range.masked(n_block), alpha);
    scores_to_a_fragments<typename Cfg::Elem>(s, pa);
    if (Cfg::VARLEN && v_zero_from < BN) zero_v_rows(vs.stage, v_zero_from);
    for (--n_block; n_block >= range.n_begin; --n_block) {
      turn_wait();
      fence_operands(o);
      fence_operands(pa);
      issue_qk(s, ks);
      issue_pv(pa, vs);
      turn_pass();
      wgmma_wait<1>();
      fence_operands(s);
      softmax(s, n_block, range.masked(n_block), alpha, true, ks.stage);
      release(bars.empty_k, ks.stage);  // after the softmax, which may read the K tile again
      ks.advance();
      wgmma_wait<0>();
      fence_operands(o);
      fence_operands(pa);
      release(bars.empty_v, vs.stage);
      vs.advance();
      rescale_rows(o, alpha);
      scores_to_a_fragments<typename Cfg::Elem>(s, pa);
    }
    release_q();  // every S = Q K^T of the tile has completed
    turn_wait();
    fence_operands(o);
    fence_operands(pa);
    issue_pv(pa, vs);
    turn_pass();
    wgmma_wait<0>();
    fence_operands(o);
    release(bars.empty_v, vs.stage);
    vs.advance();  // the ring runs on into the next tile of a persistent CTA
  }

  // EXT: mainloop over the tiles of the walk (mask_walk.cuh) instead of a range; the same pipeline.
  // Each tile's need is found before its products are issued (its key ids load under them).
  // tile_idx, row0: the work tile and this thread's first row (ext_classify: a mask mod's bits).
  __device__ __forceinline__ void mainloop_ext(const ExtWalk &w, int tile_idx, int row0) {
    float s[BN / 2], alpha[2];
    uint32_t pa[BN / 4];
    int kind;
    int n = ext_walk_tile(p.ext, w, 0, BN, ext_sk, &kind);
    ext_classify(w, 0, n, kind, tile_idx, row0);
    turn_wait();
    issue_qk(s, ks);
    turn_pass();
    wgmma_wait<0>();
    fence_operands(s);
    release(bars.empty_k, ks.stage);
    ks.advance();
    softmax(s, n, ext_need != kNeedNone, alpha);
    scores_to_a_fragments<typename Cfg::Elem>(s, pa);
    ext_zero_v(n);
    for (int it = 1; it < w.count; ++it) {
      n = ext_walk_tile(p.ext, w, it, BN, ext_sk, &kind);
      ext_classify(w, it, n, kind, tile_idx, row0);
      turn_wait();
      fence_operands(o);
      fence_operands(pa);
      issue_qk(s, ks);
      issue_pv(pa, vs);
      turn_pass();
      wgmma_wait<1>();
      fence_operands(s);
      softmax(s, n, ext_need != kNeedNone, alpha, true, ks.stage);
      release(bars.empty_k, ks.stage);  // after the softmax, which may read the K tile again
      ks.advance();
      wgmma_wait<0>();
      fence_operands(o);
      fence_operands(pa);
      release(bars.empty_v, vs.stage);
      vs.advance();
      rescale_rows(o, alpha);
      scores_to_a_fragments<typename Cfg::Elem>(s, pa);
      ext_zero_v(n);
    }
    release_q();
    turn_wait();
    fence_operands(o);
    fence_operands(pa);
    issue_pv(pa, vs);
    turn_pass();
    wgmma_wait<0>();
    fence_operands(o);
    release(bars.empty_v, vs.stage);
    vs.advance();
  }

  // QREG: this warp's 16 Q rows as wgmma A fragments (the m16n8k16 A layout: ldmatrix x4 over rows
  // lane % 16 and column halves lane / 16 of each 16-column step), from the 128B-swizzled Q tile.
  __device__ __forceinline__ void load_q_fragments() {
    if constexpr (Cfg::QREG) {
      const int row = wg * 64 + warp * 16 + (lane & 15);
#pragma unroll
      for (int k = 0; k < D / 16; ++k) {
        const uint32_t addr = swizzled_128b(smem_addr(smem + Cfg::Q_OFF), Cfg::BM, row, 16 * k + 8 * (lane >> 4));
        flashbox::cuda::ldmatrix_x4(reinterpret_cast<uint32_t(&)[4]>(qa[4 * k]), addr);
      }
    }
  }

  // softmax_finalize with a learnable sink (sink2: its logit times log2 e) in the row's denominator
  // (cuda/common/sink.cuh): m goes to base-2 units (m * score_scale_log2, -inf for a row that saw no
  // key), the sink joins m and l there, O is scaled by the fold's factor over the new l, and
  // LSE = (m' + log2 l') ln 2; a row that saw no key gets O = 0 and LSE = the sink.
  __device__ __forceinline__ void finalize_with_sink(float sink2, float (&lse)[2]) {
    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float total = quad_sum(l[r]), m2 = m[r] * score_scale_log2();
      const float o_mul = cuda::fold_sink(m2, total, sink2);
      const bool empty = !(total > 0.f);  // only without a finite sink; also catches NaN
      inv[r] = empty ? 0.f : o_mul / total;
      lse[r] = empty ? -INFINITY : (m2 + log2f(total)) * cuda::kLn2;
    }
#pragma unroll
    for (int i = 0; i < DV / 2; ++i) o[i] *= inv[acc_half(i)];
  }

  // The tile's learnable sink times log2 e. The plain configurations read it at the tile's start
  // (sink2): decoding the tile for it in the epilogue put a second inlined decode (its divisions)
  // there, and the head_dim 128 kernel ran 5 % more cycles at T 512 causal on the H100 (ncu), same
  // instructions executed. MODS and EXT decode it here: a register held through their main loop
  // added 8 bytes of spills (ptxas -v).
  __device__ __forceinline__ float tile_sink2(int tile_idx) const {
    if constexpr (kSinkAtTileStart)
      return sink2;
    else
      return p.sinks[decode_tile_of<Cfg>(p, tile_idx).h] * kLog2e;
  }

  // O / l into this warpgroup's rows of the staging buffer (the O buffer, or its Q rows; the
  // 128B-swizzled layout the O tensor map expects), then one TMA store per 64-column panel; LSE from
  // the lanes that own column 0.
  // >>> report:finalize
  // tile_idx: the tile is decoded again here, after O has left the registers (it is not kept live
  // through the main loop: head_dim 256 has no register to spare, ptxas -v showed 72 bytes of
  // spills that way).
  __device__ __forceinline__ void epilogue(int tile_idx, int row0) {
    using T = typename Cfg::Elem;
    const bool own_o = Cfg::O_FITS && p.separate_o;
    float lse[2];
    if (p.sinks != nullptr)
      finalize_with_sink(tile_sink2(tile_idx), lse);
    else
      softmax_finalize(o, m, l, score_scale(), lse);
    uint8_t *slice = smem + (own_o ? Cfg::O_OFF : Cfg::Q_OFF) + wg * 64 * 128;
    // The previous tile's store has read the slice: with the O buffer its thread waits only now.
    if (own_o && warp == 0 && lane == 0) tma_store_wait_read();
    named_barrier_sync(kEpilogueBarrier + wg, 128);
    const int row = warp * 16 + (lane & 7) + 8 * ((lane >> 3) & 1);
#pragma unroll
    for (int c = 0; c < DV / 16; ++c) {
      const uint32_t addr = swizzled_128b(smem_addr(slice), Cfg::BM, row, 16 * c + 8 * (lane >> 4));
      stmatrix_x4(addr, pack2<T>(o[8 * c], o[8 * c + 1]), pack2<T>(o[8 * c + 2], o[8 * c + 3]),
                  pack2<T>(o[8 * c + 4], o[8 * c + 5]), pack2<T>(o[8 * c + 6], o[8 * c + 7]));
    }
    fence_view_async_shared();
    named_barrier_sync(kEpilogueBarrier + wg, 128);
    asm volatile("" : "+r"(tile_idx));  // opaque: decoded from here, not kept from the loop's decode
    const Tile tile = decode_tile_of<Cfg>(p, tile_idx);
    const int slice_row = tile.m_block * Cfg::BM + wg * 64;  // this warpgroup's first row in the sequence
    // Varlen, the sequence ends inside this slice: a TMA box would write the next sequence's rows.
    // (Not compiled for head_dim 192 and 256, whose plan declines varlen: with this path the 256
    // kernel spilled 44 bytes, ptxas -v, even with an empty copy loop.)
    // EXT: also when seqused_q ends a fixed-length sequence's rows inside the slice (or before it: no
    // row is stored), so that rows past the used ones keep their values.
    const bool partial =
        Cfg::VARLEN && (p.cu_q != nullptr || (Cfg::EXT && tile.sq < p.seqlen_q)) && slice_row + 64 > tile.sq;
    if (partial) {
      // The slice's rows before the sequence's end, copied out by the group's 128 threads, 16 bytes
      // each (the staging above keeps the registers of O out of it: storing them straight from the
      // accumulators made head_dim 256 spill). The next epilogue's barrier orders these reads before
      // its writes of the slice.
      const int rows = max(min(tile.sq - slice_row, 64), 0);
      T *o_base = static_cast<T *>(p.o) + int64_t(tile.q0 + slice_row) * p.o_seq + int64_t(tile.h) * p.o_head +
                  (Cfg::EXT && p.cu_q == nullptr ? int64_t(tile.b) * p.o_batch : 0);
      // Only the call's head_dim_v columns (a multiple of 8: whole 16-byte chunks); the row's bytes
      // past them belong to the caller (a strided O, or the next head).
      for (int i = warp * 32 + lane; i < rows * (DV / 8); i += 128) {
        const int r = i / (DV / 8), col = 8 * (i % (DV / 8));
        if (col >= p.head_dim_v) continue;
        const uint4 chunk = *reinterpret_cast<const uint4 *>(slice + (swizzled_128b(0, Cfg::BM, r, col)));
        *reinterpret_cast<uint4 *>(o_base + int64_t(r) * p.o_seq + col) = chunk;
      }
      if (!own_o) {  // the Q rows held O: free once every thread of the group has read its part
        named_barrier_sync(kEpilogueBarrier + wg, 128);
        if (warp == 0 && lane == 0) mbar_arrive(bars.empty_q);
      }
    } else if (warp == 0 && lane == 0) {
#pragma unroll
      for (int pnl = 0; pnl < Cfg::O_PANELS; ++pnl) {
        const int4 c = tma_coords(p.ord_o, pnl * 64, tile.q0 + slice_row, tile.h, tma_batch(p, tile));
        tma_store_4d(&p.tm_o, slice + pnl * Cfg::BM * 128, c.x, c.y, c.z, c.w);
      }
      tma_store_commit();
      if (!own_o) {
        tma_store_wait_read();
        mbar_arrive(bars.empty_q);  // the Q rows held O: Q buffer free for the producer's next Q
      }
    }
    if (p.lse != nullptr && (lane & 3) == 0) {
      // Fixed length [batch, heads_q, seqlen_q]; varlen [heads_q, total_q] from the sequence's first token.
      const int64_t base = p.cu_q != nullptr ? int64_t(tile.h) * p.total_q + tile.q0
                                             : (int64_t(tile.b) * p.heads_q + tile.h) * p.seqlen_q;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row_abs = row0 + 8 * r;
        if (row_abs < tile.sq) p.lse[base + row_abs] = lse[r];
      }
    }
  }
  // <<< report:finalize
};

template <class Cfg>
__device__ __forceinline__ void consumer(const FwdParams &p, uint8_t *smem, Barriers bars, int wg) {
  Consumer<Cfg> c{p, bars, smem};
  const int t = threadIdx.x % 128;
  c.wg = wg, c.lane = t % 32, c.warp = t / 32;
  c.q_desc = make_smem_desc(smem_addr(smem + Cfg::Q_OFF) + wg * 64 * 128, 16, 1024);
  c.k_desc0 = make_smem_desc(smem_addr(smem + Cfg::K_OFF), 16, 1024);
  // V: LBO one panel, SBO eight rows (the swizzle atom's height), in the panel's row bytes.
  c.v_desc0 = make_smem_desc(smem_addr(smem + Cfg::V_OFF), Cfg::BN * Cfg::V_ROW_BYTES, 8 * Cfg::V_ROW_BYTES,
                             Cfg::V_LAYOUT);
  if constexpr (Cfg::MODS) {
    c.mods_scale = p.mods.capped() ? p.mods.softcap : p.scale;
    c.mods_scale_log2 = p.mods.capped() ? p.mods.softcap * 1.44269504088896341f : p.scale_log2;
  }
  if (wg == Cfg::NWG - 1) named_barrier_arrive(kPingPongBarrier, 256);  // group 0 first
  uint32_t q_parity = 0;
  const int num_tiles = tiles_to_walk(p);
  for (int round = 0; round * int(gridDim.x) < num_tiles; ++round) {
    const int tile_idx = tile_position(round);
    if (tile_idx >= num_tiles) continue;
    const Tile tile = decode_tile_of<Cfg>(p, tile_idx);
    const BlockRange range = block_range(p.mods, tile.m_block, Cfg::BM, Cfg::BN, tile.sq, tile.sk);
    const int row0 = tile.m_block * Cfg::BM + wg * 64 + c.warp * 16 + c.lane / 4;
    const int sk = tile.sk, shift = sk - tile.sq;
    if (Consumer<Cfg>::kSinkAtTileStart && p.sinks != nullptr) c.sink2 = p.sinks[tile.h] * kLog2e;
    c.begin0 = cuda::mods_key_begin(p.mods, row0, shift, sk), c.end0 = cuda::mods_key_end(p.mods, row0, shift, sk);
    c.begin1 = cuda::mods_key_begin(p.mods, row0 + 8, shift, sk);
    c.end1 = cuda::mods_key_end(p.mods, row0 + 8, shift, sk);
    if constexpr (Cfg::MODS) {
      c.alibi_d0 = float(row0 + shift);
      c.slope = cuda::mods_slope(p.mods, tile.b, tile.h) * (p.mods.capped() ? p.mods.softcap_inv : p.inv_scale);
    }
#pragma unroll
    for (int i = 0; i < Cfg::DV / 2; ++i) c.o[i] = 0.f;
    c.m[0] = c.m[1] = -INFINITY;
    c.l[0] = c.l[1] = 0.f;
    // Also for a tile without keys: the consumers then cannot run ahead of the producer's Q loads,
    // and neither Q barrier falls two phases behind.
    mbar_wait(bars.full_q, q_parity);
    q_parity ^= 1;
    c.load_q_fragments();
    if constexpr (Cfg::EXT) {
      c.ext_setup(tile, row0);
      const ExtWalk w = tile_walk<Cfg>(p, tile);
      if (w.count > 0)
        c.mainloop_ext(w, tile_idx, row0);
      else
        c.release_q();
    } else if (range.count() > 0) {
      // Varlen: the first block's rows past the sequence's end, unless the tensor ends there (the
      // TMA then fills zeros).
      int v_zero_from = Cfg::BN;
      if (Cfg::VARLEN && p.cu_q != nullptr && tile.k0 + tile.sk < p.total_k)
        v_zero_from = min(tile.sk - (range.n_end - 1) * Cfg::BN, Cfg::BN);
      // Head dims 192 and 256 walk the tile's range in every group (with the group's walk the 256
      // kernel spilled 20 bytes, ptxas -v; their 128-row tiles gain from it only in a ragged last tile).
      if constexpr (Cfg::D <= 128) {
        const BlockRange own = group_range(p.mods, tile.m_block * Cfg::BM + wg * 64, Cfg::BN, tile.sq, sk);
        c.walk(range, own, v_zero_from);
      } else {
        c.mainloop(range, v_zero_from);
      }
    } else {
      c.release_q();
    }
    c.epilogue(tile_idx, row0);
  }
  // The last store has read its shared-memory source before the CTA exits (its global writes need
  // no wait: they complete with the grid).
  if (c.warp == 0 && c.lane == 0) tma_store_wait_read();
}

template <class Cfg>
__global__ void __launch_bounds__(Cfg::THREADS, 1) flash_fwd_sm90_kernel(const __grid_constant__ FwdParams p) {
  extern __shared__ uint8_t smem_raw[];
  uint8_t *smem = reinterpret_cast<uint8_t *>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  // Q is released by every consumer warp (separate O buffer) or by each warpgroup's storing thread.
  const Barriers bars = setup_barriers<Cfg::STAGES, Cfg::NWG>(reinterpret_cast<uint64_t *>(smem + Cfg::BAR_OFF),
                                                              Cfg::O_FITS && p.separate_o ? 4 * Cfg::NWG : Cfg::NWG);
  split_roles<Cfg::PRODUCER_REGS, Cfg::CONSUMER_REGS>([&] { producer<Cfg>(p, smem, bars); },
                                                      [&](int wg) { consumer<Cfg>(p, smem, bars, wg); });
}

}  // namespace flashbox::sm90
