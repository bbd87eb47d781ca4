// Split-KV decode kernel ("flash-decoding"), sm_80+ (mma.sync, cp.async, ldmatrix; runs on Hopper).
//
// Decode reads the whole KV cache for a handful of query rows, so it is bound by HBM bandwidth: the
// design goal is every cache byte read once, with many bytes in flight per SM.
//   Grid     (num_splits, heads_kv * row_tiles, batch). One CTA owns one KV head of one batch entry and
//            one contiguous range of its keys (its split).
//   GQA      the seqlen_q x (heads_q / heads_kv) query rows of one KV head are packed into one 16-row
//            tile (row r = token r / group, head r % group), so K/V are read once per group; more rows
//            than 16 take more row tiles (grid.y), each reading the keys again.
//   Keys     64-key blocks through a kStages-deep cp.async ring (16-byte copies, XOR-swizzled rows;
//            D128 2 stages, D64 4), a contiguous cache's rows one multiply-add apart, a paged key's
//            page looked up through the block table one block before its copy.
//   Warps    4 warps, each takes 16 keys of every block: S = Q K^T (mma.sync m16n8k16, fp32, two
//            independent chains), masked only where a block is not inside every row's range, an online
//            softmax per warp (FlashAttention-2 section 3.1) that rescales O only when a row max moves,
//            O += P V with P straight from the S accumulators. Q stays in registers for the whole CTA.
//   Merge    at the end the 4 warps' (m, l, O) merge through shared memory (the same LSE merge as the
//            combine kernel); with one split the CTA writes O and LSE (a learnable sink folded in
//            first), else its normalised fp32 O and its LSE go to the split workspace for
//            decode_combine.cuh, which folds the sink in once over all the splits.
// Masking (causal bottom-right, window, leftpad, the split's own range) is one compare per score
// against per-row key bounds; keys past the range are zero-filled copies, so P * V never meets garbage.
// FP8 e4m3 cache (C = __nv_fp8_e4m3): the ring holds the cache's bytes as they are in HBM (half of a
//            16-bit cache's, so one 16-byte copy brings 16 elements; rows swizzled for the loads
//            below), and each lane loads the bytes of its own mma.sync B fragments with 16-byte (D64
//            V: 8-byte) shared loads and converts them in registers (decode_fp8_convert.cuh: exact,
//            values * 2^-8), no 16-bit copy in shared memory: decode_fp8_fragments.cuh says how the
//            head-dim columns, the keys and O's columns are relabelled to make every lane's bytes
//            contiguous (Q's fragments and the scores' masks follow; the merge undoes O's order).
//            K in the dtype of q; V always in fp16, with P packed in fp16 (P <= 1: more mantissa
//            than bf16).
//            The descales are folded: k_descale[b, g] * 2^8 into the score scale, v_descale[b, g] *
//            2^8 into the output's normalisation (once per row at the end; the split partials are
//            linear in V, so the combine is unchanged).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <type_traits>

#include <cstdint>

#include "core/kvcache_rules.hpp"
#include "cuda/common/element_type.cuh"
#include "cuda/common/ldmatrix.cuh"
#include "cuda/common/mma.cuh"
#include "cuda/common/sink.cuh"
#include "cuda/decode/decode_fp8_convert.cuh"
#include "cuda/decode/decode_fp8_fragments.cuh"
#include "cuda/decode/decode_params.hpp"

namespace flashbox::cuda::decode {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kBlockKeys = 64;  // keys per pipeline stage (16 per warp)
constexpr int kTileRows = 16;   // query rows per CTA (one mma M tile)

// Ring depth per head dim, measured (docs/decode.md, docs/perf-history.md): D128 2 x 32 KB (2 CTAs per SM;
// 4.0-4.2 TB/s on the H200 against 3.5-3.9 at 3 stages and 3.6 at 6), D64 4 x 16 KB (3 CTAs per SM;
// 8 stages was slower). More bytes in flight than the DRAM needs made it slower, not faster.
template <int D>
constexpr int kDefaultStages = D == 64 ? 4 : 2;
// The e4m3 cache's ring (stages half the bytes), chosen from what limits the CTAs per SM (registers,
// 128 threads; sm_90a ptxas: D64 128, D128 203, D256 254-255) and the 16-bit kernels' measured best
// of about 64 KB in flight per SM: D64 4 x 8 KB (34 KB a CTA, 4 CTAs per SM by registers), D128
// 4 x 16 KB (68 KB, 2 CTAs by registers, 48 KB in flight each), D256 2 x 32 KB (72 KB, 2 CTAs by
// registers: the 16-bit D128 kernel's shape, 2 stages of 32 KB twice an SM). Not yet measured on a GPU.
template <int D>
constexpr int kFp8Stages = D == 256 ? 2 : 4;

template <int D, int kStagesT = kDefaultStages<D>, typename C = void>
struct SplitTraits {
  static constexpr bool kFp8 = std::is_same_v<C, __nv_fp8_e4m3>;
  static constexpr int kCacheBytes = kFp8 ? 1 : 2;         // bytes per cache element
  static constexpr int kChunks = D / 8;                    // 16-byte chunks per 16-bit row (Q, 16-bit ring)
  static constexpr int kCacheChunks = D * kCacheBytes / 16;  // 16-byte chunks per cache row
  static constexpr int kChunkElems = 16 / kCacheBytes;     // cache elements per chunk
  static constexpr int kStages = kStagesT;                 // ring depth
  static constexpr int kStageBytes = 2 * kBlockKeys * D * kCacheBytes;  // K and V of one block
  static constexpr int kQElems = kTileRows * D;
  static constexpr size_t kRingBytes = size_t(kStages) * kStageBytes;
  static constexpr size_t kSmemBytes = size_t(kQElems) * 2 + kRingBytes;
  static constexpr int64_t kBytesInFlight = int64_t(kStages - 1) * kStageBytes;
  // The epilogue's merge buffer [warps][16][D] fp32 plus m and l reuses the ring (fp8: Q's tile and
  // the ring, Q being dead by then).
  static_assert(size_t(kWarps * kTileRows * D + 2 * kWarps * kTileRows) * 4 <= (kFp8 ? kSmemBytes : kRingBytes),
                "merge buffer must fit in the K/V ring");
  static_assert(kThreads % kCacheChunks == 0 && kBlockKeys % (kThreads / kCacheChunks) == 0,
                "a block's rows must split evenly over the threads");
};

// Element offset of (row, chunk) in a [rows][D] tile with 16-byte chunks XOR-swizzled by row % 8, so
// the 8 rows an ldmatrix reads at one logical chunk land in 8 different bank groups.
template <int D>
__device__ __forceinline__ int swizzle(int row, int chunk) {
  return row * D + ((chunk ^ (row & 7)) << 3);
}

// cp.async of 16 bytes with an L2 prefetch hint of 128 bytes (a cache row is at least 128 bytes).
__device__ __forceinline__ void cp_async_16_l2(uint32_t smem_dst, const void *gmem_src, bool valid) {
  const int src_size = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(smem_dst), "l"(gmem_src),
               "r"(src_size));
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void wait_pending() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ float fast_exp2(float x) { return exp2f(x); }

// C: the cache's element type, T (a 16-bit cache) or __nv_fp8_e4m3.
template <typename T, int D, int kStagesT = kDefaultStages<D>, typename C = T>
__global__ void __launch_bounds__(kThreads) decode_split_kernel(const DecodeParams p) {
  using Tr = SplitTraits<D, kStagesT, C>;
  constexpr int kChunks = Tr::kChunks, kStages = Tr::kStages;
  constexpr int kCacheChunks = Tr::kCacheChunks, kChunkElems = Tr::kChunkElems;
  constexpr bool kFp8 = Tr::kFp8;
  constexpr bool kBf16 = ElementTraits<T>::is_bf16;
  // P * V runs in the dtype of V in shared memory: T, or fp16 for an fp8 cache (see the top).
  using TV = std::conditional_t<kFp8, __half, T>;
  constexpr bool kBf16V = ElementTraits<TV>::is_bf16;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T *sq = reinterpret_cast<T *>(smem_raw);
  unsigned char *ring = smem_raw + Tr::kQElems * 2;  // kStages stages of K then V, kStageBytes each

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int split = blockIdx.x;
  const int hk = blockIdx.y / p.row_tiles, rt = blockIdx.y % p.row_tiles;
  const int b = blockIdx.z;

  const int64_t total = int64_t(p.cache_seqlens[b]) + p.seqlen_new;
  const int64_t start = p.cache_leftpad ? int64_t(p.cache_leftpad[b]) : 0;
  const int row0 = rt * kTileRows;
  const int row_last = min(p.rows, row0 + kTileRows) - 1;

  // The keys any row of this tile sees (bounds move monotonically with the token index), clamped to
  // what the cache holds so a bad trusted table cannot send a copy outside it; then this split's part.
  const kvcache::KeyRange first = kvcache::visible_keys(total, start, p.seqlen_q, row0 / p.group, p.causal,
                                                        p.has_window, p.window_left, p.window_right);
  const kvcache::KeyRange last = kvcache::visible_keys(total, start, p.seqlen_q, row_last / p.group, p.causal,
                                                       p.has_window, p.window_left, p.window_right);
  const int64_t lo = max(int64_t(0), first.lo), hi = min(p.capacity, last.hi);
  const int64_t n_keys = hi > lo ? hi - lo : 0;
  const int64_t per_split = ((n_keys + p.num_splits - 1) / p.num_splits + kBlockKeys - 1) / kBlockKeys * kBlockKeys;
  const int64_t my_lo = lo + int64_t(split) * per_split;
  const int64_t my_hi = min(hi, my_lo + per_split);
  const int n_blocks = my_hi > my_lo ? int((my_hi - my_lo + kBlockKeys - 1) / kBlockKeys) : 0;

  const T *q = static_cast<const T *>(p.q);
  const C *kc = static_cast<const C *>(p.k_cache);
  const C *vc = static_cast<const C *>(p.v_cache);

  // Q tile -> shared memory (zeros for rows past the group), its own cp.async group.
  for (int idx = tid; idx < kTileRows * kChunks; idx += kThreads) {
    const int r = idx / kChunks, c = idx % kChunks, row = row0 + r;
    const bool valid = row < p.rows && c * 8 < p.head_dim;
    const int i = valid ? row / p.group : 0, hq = hk * p.group + (valid ? row % p.group : 0);
    const T *src = q + b * p.q_stride[0] + i * p.q_stride[1] + hq * p.q_stride[2] + c * 8;
    cp_async_16_l2(smem_addr(sq + swizzle<D>(r, c)), valid ? src : q, valid);
  }
  commit();

  // One 64-key block of K and V into ring stage `stage`. Each thread copies chunk tid % kCacheChunks
  // of rows tid / kCacheChunks + k * (kThreads / kCacheChunks). A contiguous cache's entry is fixed for the CTA, so
  // a row costs one multiply-add per tensor. A paged row's page is looked up one block ahead
  // (look_up below): the table load is in flight while the previous block computes, so no copy waits
  // on it (looked up in the copy loop itself, the dependent load cost the paged path ~30 %).
  constexpr int kRowStep = kThreads / kCacheChunks;
  constexpr int kRowsPerThread = kBlockKeys / kRowStep;
  const int chunk = tid % kCacheChunks;
  const bool chunk_ok = chunk * kChunkElems < p.head_dim;  // columns past head_dim: zero-filled, never read
  int64_t entry_k = 0, entry_v = 0;  // contiguous: element offsets of (entry, head, chunk)
  bool entry_ok = true;
  if (!p.block_table) {
    const int64_t e = p.cache_batch_idx ? int64_t(__ldg(p.cache_batch_idx + b)) : int64_t(b);
    entry_ok = e >= 0 && e < p.cache_entries;
    entry_k = e * p.k_stride[0] + hk * p.k_stride[2] + chunk * kChunkElems;
    entry_v = e * p.v_stride[0] + hk * p.v_stride[2] + chunk * kChunkElems;
  }
  // Paged: the table entry and in-page row of each row this thread copies in one block (entry -1:
  // past the split's keys). 32-bit page arithmetic: validation keeps keys and page sizes below 2^31.
  struct PageRows {
    int32_t entry[kRowsPerThread];
    int32_t row[kRowsPerThread];
  };
  auto look_up = [&](int blk, PageRows &pr) {
    const int64_t kb = my_lo + int64_t(blk) * kBlockKeys;
    const int32_t *table = p.block_table + b * p.block_table_stride;
#pragma unroll
    for (int k = 0; k < kRowsPerThread; ++k) {
      const int64_t j = kb + tid / kCacheChunks + k * kRowStep;
      const uint32_t page = uint32_t(j) / uint32_t(p.cache_rows);
      pr.entry[k] = j < my_hi ? __ldg(table + page) : -1;
      pr.row[k] = int32_t(uint32_t(j) - page * uint32_t(p.cache_rows));
    }
  };
  // Where (row, chunk) of a stage's K or V lands: 16-bit rows swizzled for ldmatrix, fp8 rows for
  // the fragment loads of decode_fp8_fragments.cuh.
  auto ring_offset = [](int r, int c) -> int { return kFp8 ? fp8_ring_offset<D>(r, c) : swizzle<D>(r, c) * 2; };
  auto load_block = [&](int blk, int stage, const PageRows &pr) {
    unsigned char *sk = ring + stage * Tr::kStageBytes;
    unsigned char *sv = sk + kBlockKeys * D * Tr::kCacheBytes;
    const int64_t kb = my_lo + int64_t(blk) * kBlockKeys;
#pragma unroll
    for (int k = 0; k < kRowsPerThread; ++k) {
      const int r = tid / kCacheChunks + k * kRowStep;
      const int64_t j = kb + r;
      int64_t ko, vo;
      bool ok;
      if (!p.block_table) {
        ok = j < my_hi && entry_ok && chunk_ok;
        ko = entry_k + j * p.k_stride[1];
        vo = entry_v + j * p.v_stride[1];
      } else {
        // A bad entry of a trusted table (validation checks the host's) is a zero row, never a read
        // outside the cache.
        const int64_t entry = pr.entry[k], row = pr.row[k];
        ok = chunk_ok && entry >= 0 && entry < p.cache_entries && row < p.cache_rows;
        ko = entry * p.k_stride[0] + row * p.k_stride[1] + hk * p.k_stride[2] + chunk * kChunkElems;
        vo = entry * p.v_stride[0] + row * p.v_stride[1] + hk * p.v_stride[2] + chunk * kChunkElems;
      }
      cp_async_16_l2(smem_addr(sk + ring_offset(r, chunk)), ok ? kc + ko : kc, ok);
      cp_async_16_l2(smem_addr(sv + ring_offset(r, chunk)), ok ? vc + vo : vc, ok);
    }
  };

  PageRows pages{};  // paged: the rows of the next block to copy
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < n_blocks) {
      if (p.block_table) look_up(s, pages);
      load_block(s, s, pages);
    }
    commit();
  }
  if (p.block_table && kStages - 1 < n_blocks) look_up(kStages - 1, pages);

  // Per-thread rows g and g + 8 of the tile: their visible key bounds and ALiBi slope / position.
  int64_t row_lo[2], row_hi[2], row_pos[2];
  float row_slope[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + g + 8 * h;
    if (row < p.rows) {
      const int i = row / p.group;
      const kvcache::KeyRange r =
          kvcache::visible_keys(total, start, p.seqlen_q, i, p.causal, p.has_window, p.window_left, p.window_right);
      row_lo[h] = r.lo;
      row_hi[h] = min(r.hi, my_hi);
      row_pos[h] = total - p.seqlen_q + i;
      row_slope[h] = p.alibi_slopes ? p.alibi_slopes[b * p.alibi_batch_stride + hk * p.group + row % p.group] : 0.f;
    } else {
      row_lo[h] = 0, row_hi[h] = 0, row_pos[h] = 0, row_slope[h] = 0.f;
    }
  }
  const bool plain_scores = p.softcap == 0.f && p.alibi_slopes == nullptr;
  // Keys every row of the tile sees: a block inside [all_lo, all_hi) needs no mask (padding rows past
  // the group then score against real keys, harmlessly: they are never stored).
  const int64_t all_lo = max(last.lo, my_lo), all_hi = min(first.hi, my_hi);
  // fp8: the descales of (b, hk), with the 2^-8 of the converted values undone (decode_fp8_convert.cuh).
  float score_scale = p.scale, out_scale = 1.f;
  if constexpr (kFp8) {
    score_scale *= kvcache::descale_at(p.k_descale, p.k_descale_stride[0], p.k_descale_stride[1], b, hk) /
                   kFp8RowScale;
    out_scale = kvcache::descale_at(p.v_descale, p.v_descale_stride[0], p.v_descale_stride[1], b, hk) / kFp8RowScale;
  }
  const float scale_log2 = score_scale * 1.4426950408889634f;

  // Q fragments: wait for the Q group (the kStages - 1 block groups may still be in flight).
  wait_pending<kStages - 1>();
  __syncthreads();
  // Q's A fragment of k-step kk from shared memory. Up to D128 all of Q stays in registers for the
  // CTA; at D256 (O alone takes 128 registers a thread) it is re-read per block, which ptxas would
  // otherwise do through local memory.
  constexpr bool kQInRegisters = D <= 128;
  auto load_q = [&](int kk, uint32_t (&f)[4]) {
    const int mi = lane >> 3;
    const int r = (mi & 1) * 8 + (lane & 7), c = kk * 2 + (mi >> 1);
    ldmatrix_x4(f, smem_addr(sq + swizzle<D>(r, c)));
  };
  uint32_t qf[kQInRegisters ? D / 16 : 1][4];
  if constexpr (kQInRegisters) {
    if constexpr (kFp8) {
      // The k-steps in the order of the fp8 K fragments (decode_fp8_fragments.cuh).
#pragma unroll
      for (int span = 0; span < D / 64; ++span) {
        uint32_t f[4][4];
        fp8_load_q<D>(sq, span, g, t, f);
#pragma unroll
        for (int m = 0; m < 4; ++m)
#pragma unroll
          for (int x = 0; x < 4; ++x) qf[4 * span + m][x] = f[m][x];
      }
    } else {
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) load_q(kk, qf[kk]);
    }
  }

  float acc[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};

  for (int blk = 0; blk < n_blocks; ++blk) {
    wait_pending<kStages - 2>();
    __syncthreads();  // block `blk` visible to all; stage of block blk - 1 free
    if (blk + kStages - 1 < n_blocks) {
      load_block(blk + kStages - 1, (blk + kStages - 1) % kStages, pages);
      if (p.block_table && blk + kStages < n_blocks) look_up(blk + kStages, pages);  // used next iteration
    }
    commit();

    // S = Q K^T for this warp's 16 keys: two n8 tiles, even and odd k-steps in separate accumulators
    // (two independent mma chains of D / 32 instead of one of D / 16).
    const int key_row0 = warp * 16;  // the warp's first key in the block
    // 16-bit cache: the stage's K and V tiles as ldmatrix reads them.
    const T *sk = reinterpret_cast<const T *>(ring + (blk % kStages) * Tr::kStageBytes);
    const TV *sv = reinterpret_cast<const TV *>(sk + kBlockKeys * D);
    float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
    float s_odd[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
    if constexpr (kFp8) {
      // This warp's 16 rows of K in the byte ring, converted as they are loaded.
      const unsigned char *rk = ring + (blk % kStages) * Tr::kStageBytes + key_row0 * D;
#pragma unroll
      for (int span = 0; span < D / 64; ++span) {
        uint32_t q4[4][4];
        if constexpr (kQInRegisters) {
#pragma unroll
          for (int m = 0; m < 4; ++m)
#pragma unroll
            for (int x = 0; x < 4; ++x) q4[m][x] = qf[4 * span + m][x];
        } else {
          fp8_load_q<D>(sq, span, g, t, q4);
        }
#pragma unroll
        for (int n = 0; n < 2; ++n) {
          uint32_t kb[4][2];
          fp8_load_k<D, kBf16>(rk, span, n, g, t, kb);
#pragma unroll
          for (int m = 0; m < 4; ++m) mma_m16n8k16<kBf16>(m % 2 == 0 ? s[n] : s_odd[n], q4[m], kb[m][0], kb[m][1]);
        }
      }
    } else {
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        const int mi = lane >> 3;
        const int r = key_row0 + (mi >> 1) * 8 + (lane & 7), c = kk * 2 + (mi & 1);
        uint32_t kf[4];
        ldmatrix_x4(kf, smem_addr(sk + swizzle<D>(r, c)));
        uint32_t qk[4];
        if constexpr (kQInRegisters) {
#pragma unroll
          for (int x = 0; x < 4; ++x) qk[x] = qf[kk][x];
        } else {
          load_q(kk, qk);
        }
        if (kk % 2 == 0)
          mma_m16n16k16<kBf16>(s[0], s[1], qk, kf);
        else
          mma_m16n16k16<kBf16>(s_odd[0], s_odd[1], qk, kf);
      }
    }
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[n][e] += s_odd[n][e];

    // Scores to log2 units, masked where the block is not inside every row's range, and the online
    // softmax of rows g (e = 0, 1) and g + 8 (e = 2, 3).
    const int64_t block_key0 = my_lo + int64_t(blk) * kBlockKeys;
    const int64_t key_base = block_key0 + key_row0;
    const bool interior = plain_scores && block_key0 >= all_lo && block_key0 + kBlockKeys <= all_hi;
    float mx[2] = {-INFINITY, -INFINITY};
    if (interior) {
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          s[n][e] *= scale_log2;
          mx[e >> 1] = fmaxf(mx[e >> 1], s[n][e]);
        }
    } else {
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int h = e >> 1;
          // The score's key (fp8: its column's ring row, decode_fp8_layout.hpp).
          const int64_t j = kFp8 ? key_base + fp8_key_row(n * 8 + 2 * t + (e & 1)) : key_base + n * 8 + 2 * t + (e & 1);
          float x;
          if (plain_scores) {
            x = s[n][e] * scale_log2;
          } else {
            x = s[n][e] * score_scale;
            if (p.softcap > 0.f) x = p.softcap * tanhf(x / p.softcap);
            x -= row_slope[h] * float(row_pos[h] > j ? row_pos[h] - j : j - row_pos[h]);
            x *= 1.4426950408889634f;
          }
          x = (j >= row_lo[h] && j < row_hi[h]) ? x : -INFINITY;
          s[n][e] = x;
          mx[h] = fmaxf(mx[h], x);
        }
    }
    float corr[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
      const float m_new = fmaxf(m_run[h], mx[h]);
      const float m_use = m_new == -INFINITY ? 0.f : m_new;  // a row that has seen no key yet
      corr[h] = m_new == m_run[h] ? 1.f : fast_exp2(m_run[h] - m_use);
      m_run[h] = m_new;
      mx[h] = m_use;
    }
    float rs[2] = {0.f, 0.f};
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float pe = fast_exp2(s[n][e] - mx[e >> 1]);
        s[n][e] = pe;
        rs[e >> 1] += pe;
      }
#pragma unroll
    for (int h = 0; h < 2; ++h) l_run[h] = l_run[h] * corr[h] + rs[h];
    // Rescale O only when some row's max moved (exact: otherwise every factor is 1).
    if (!__all_sync(0xffffffffu, corr[0] == 1.f && corr[1] == 1.f)) {
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        acc[n][0] *= corr[0], acc[n][1] *= corr[0];
        acc[n][2] *= corr[1], acc[n][3] *= corr[1];
      }
    }

    // O += P V: P (16 rows x 16 keys) from the two S tiles is one A fragment.
    uint32_t pf[4];
    pf[0] = ElementTraits<TV>::pack(s[0][0], s[0][1]);
    pf[1] = ElementTraits<TV>::pack(s[0][2], s[0][3]);
    pf[2] = ElementTraits<TV>::pack(s[1][0], s[1][1]);
    pf[3] = ElementTraits<TV>::pack(s[1][2], s[1][3]);
    if constexpr (kFp8) {
      const unsigned char *rv = ring + (blk % kStages) * Tr::kStageBytes + (kBlockKeys + key_row0) * D;
#pragma unroll
      for (int span = 0; span < Fp8Frag<D>::kVSpans; ++span) fp8_pv_span<D>(rv, span, g, t, pf, acc);
    } else {
#pragma unroll
      for (int c2 = 0; c2 < D / 16; ++c2) {
        const int mi = lane >> 3;
        const int r = key_row0 + (mi & 1) * 8 + (lane & 7), c = c2 * 2 + (mi >> 1);
        uint32_t vf[4];
        ldmatrix_x4_trans(vf, smem_addr(sv + swizzle<D>(r, c)));
        mma_m16n16k16<kBf16V>(acc[2 * c2], acc[2 * c2 + 1], pf, vf);
      }
    }
  }

  // Merge the 4 warps through shared memory (the ring is free once every copy has landed).
  wait_pending<0>();
  __syncthreads();
  // [warps][16][D] in the accumulators' column order (fp8: decode_fp8_fragments.cuh's, read back
  // through fp8_o_index).
  float *red = reinterpret_cast<float *>(kFp8 ? smem_raw : ring);
  float *sm_m = red + kWarps * kTileRows * D;    // [warps][16]
  float *sm_l = sm_m + kWarps * kTileRows;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 1);
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 2);
  }
  if (t == 0) {
    sm_m[warp * kTileRows + g] = m_run[0], sm_m[warp * kTileRows + g + 8] = m_run[1];
    sm_l[warp * kTileRows + g] = l_run[0], sm_l[warp * kTileRows + g + 8] = l_run[1];
  }
#pragma unroll
  for (int n = 0; n < D / 8; ++n) {
    const int d = n * 8 + 2 * t;
    *reinterpret_cast<float2 *>(&red[(warp * kTileRows + g) * D + d]) = make_float2(acc[n][0], acc[n][1]);
    *reinterpret_cast<float2 *>(&red[(warp * kTileRows + g + 8) * D + d]) = make_float2(acc[n][2], acc[n][3]);
  }
  __syncthreads();

  for (int idx = tid; idx < kTileRows * kChunks; idx += kThreads) {
    const int r = idx / kChunks, c = idx % kChunks, row = row0 + r;
    if (row >= p.rows) continue;
    float m_all = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) m_all = fmaxf(m_all, sm_m[w * kTileRows + r]);
    float o[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    float l_all = 0.f;
    if (m_all != -INFINITY) {
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float f = fast_exp2(sm_m[w * kTileRows + r] - m_all);
        l_all += f * sm_l[w * kTileRows + r];
        if constexpr (kFp8) {
          const float *src = &red[(w * kTileRows + r) * D + fp8_o_index<D>(c * 8)];
#pragma unroll
          for (int x = 0; x < 8; ++x) o[x] += f * src[8 * x];
        } else {
          const float4 *src = reinterpret_cast<const float4 *>(&red[(w * kTileRows + r) * D + c * 8]);
          const float4 a0 = src[0], a1 = src[1];
          o[0] += f * a0.x, o[1] += f * a0.y, o[2] += f * a0.z, o[3] += f * a0.w;
          o[4] += f * a1.x, o[5] += f * a1.y, o[6] += f * a1.z, o[7] += f * a1.w;
        }
      }
    }
    const int i = row / p.group, hq = hk * p.group + row % p.group;
    // The sink (m_all and l_all are base 2) only where this CTA's values are the final ones.
    const float alpha =
        p.num_splits == 1 && p.learnable_sink ? fold_sink(m_all, l_all, p.learnable_sink[hq] * 1.4426950408889634f)
                                              : 1.f;
    // alpha 1: exactly the no-sink value; out_scale 1 unless the cache is fp8 (v_descale * 2^8).
    const float inv = (l_all > 0.f ? 1.f / l_all : 0.f) * alpha * out_scale;
#pragma unroll
    for (int x = 0; x < 8; ++x) o[x] *= inv;
    // Natural-log LSE of this CTA's keys (and the sink); -inf when it saw none.
    const float lse = l_all > 0.f ? (m_all + __log2f(l_all)) * 0.6931471805599453f : -INFINITY;
    const int64_t out_row = (int64_t(b) * p.heads_q + hq) * p.seqlen_q + i;  // the LSE layout
    if (p.num_splits == 1) {
      if (c * 8 >= p.head_dim) continue;  // the instantiation's padding columns
      T *dst = static_cast<T *>(p.o) + b * p.o_stride[0] + i * p.o_stride[1] + hq * p.o_stride[2] + c * 8;
      uint4 packed;
      packed.x = ElementTraits<T>::pack(o[0], o[1]);
      packed.y = ElementTraits<T>::pack(o[2], o[3]);
      packed.z = ElementTraits<T>::pack(o[4], o[5]);
      packed.w = ElementTraits<T>::pack(o[6], o[7]);
      *reinterpret_cast<uint4 *>(dst) = packed;
      if (c == 0 && p.lse) p.lse[out_row] = lse;
    } else {
      const int64_t rows_total = int64_t(p.batch) * p.heads_q * p.seqlen_q;
      float4 *dst = reinterpret_cast<float4 *>(p.o_partial + ((int64_t(split) * rows_total + out_row) * D + c * 8));
      dst[0] = make_float4(o[0], o[1], o[2], o[3]);
      dst[1] = make_float4(o[4], o[5], o[6], o[7]);
      if (c == 0) p.lse_partial[int64_t(split) * rows_total + out_row] = lse;
    }
  }
}

}  // namespace flashbox::cuda::decode
