// MLA decode on Hopper (sm_90a): DeepSeek's multi-head latent attention against a KV cache of one
// latent head, scores = scale * (q . k + qv . v) over 576 columns and O = P V over 512 of them
// (FlashAttention-3's qv form: q, k 64 wide, qv, v 512; or FlashMLA's 576 form: q, k 576 wide and
// V = k's first 512 columns). The scheme is FlashMLA's sm90 kernel's (one 64 x 576 Q tile against
// 64-key blocks, O split by columns over two math warpgroups), written here on flashbox's Hopper
// helpers with cp.async loads so that any page size, cache_batch_idx and zero-filled tails need no
// tensor map.
//
// Why this shape: with 128 query heads a cached key carries 2 x 128 x (576 + 512) flops against 1,152
// bytes (about 242 flops a byte, above an H100/H200's ~200 dense bf16 flops per HBM byte), so the
// kernel is bound by the tensor cores once a CTA holds 64 query rows: the cache is streamed once per
// 64-row tile (twice for 128 heads; the second read mostly from L2: the two tiles of an entry are
// neighbours in the grid) and every key block feeds 64 x 64 x 1088 multiply-adds.
//
//   Grid      (row tiles, splits, batch). Row r of a batch entry is token r / heads_q, head r % heads_q
//             (the heads of one latent KV head are GQA-packed); a tile is 64 rows, the last one padded
//             with zero rows that are never stored. A split owns a contiguous range of 64-key blocks;
//             with splits > 1 its normalised fp32 O and LSE go to a workspace that
//             cuda/decode/decode_combine.cuh merges (the 16-bit decode kernels' combine at D = 512).
//   Warpgroup 0 (producer, 56 registers): cp.async of the Q tile once, then of each key block's 64
//             rows x 576 columns into a 2-stage ring (a row is 72 16-byte chunks: k_cache's columns
//             then v_cache's, or k_cache's alone in the 576 form), keys past the split's end or on a bad
//             page zero-filled; a stage's `full` mbarrier completes through cp.async.mbarrier.arrive
//             .noinc of all 128 threads, its `empty` one when the 8 math warps have read it. Paged
//             rows are looked up one per lane (16 rows a warp) before the wait for the free stage.
//   Warpgroup 1 (scores, 224 registers): S = Q K^T (64 x 64, 36 wgmma k-steps from shared memory),
//             the causal / end-of-keys mask, the online softmax (cuda/hopper/online_softmax.cuh, lazy
//             rescale), P to shared memory with the rows' rescale factors, then O[:, 0:256] += P V
//             with P from registers; its S of the next block overlaps its P V of this one.
//   Warpgroup 2 (values, 224 registers): waits for P, rescales O[:, 256:512] and adds P V with P and
//             V from shared memory, then frees P and the stage. Its P V overlaps warpgroup 1's next S.
//   Shared    Q 72 KB (nine 64-column panels, 128B swizzle) + 2 stages x 72 KB of K (whose V panels
//             the P V products read in place) + P 8 KB + row factors 512 B + barriers = 229,952 B (one
//             CTA per SM; 2 stages are what fits beside Q).
// Numerics: fp32 accumulators, P rounded to the input type, base-2 exponentials (FlashAttention-2
// section 3.1). A row that sees no key gets O = 0 and LSE = -inf.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "core/kvcache_rules.hpp"
#include "cuda/common/softmax_math.cuh"
#include "cuda/decode/sm90/mla_decode_params.hpp"
#include "cuda/decode/sm90/mla_tile_policy.hpp"
#include "cuda/hopper/async_copy.cuh"
#include "cuda/hopper/fragment.cuh"
#include "cuda/hopper/online_softmax.cuh"
#include "cuda/hopper/wgmma.cuh"

namespace flashbox::sm90::mla {

constexpr int kThreads = 384;                       // producer, scores and values warpgroups
constexpr int kProducerRegs = 56, kMathRegs = 224;  // 128 x 56 + 256 x 224 = 64,512 = 384 x 168
constexpr float kLazyRescaleLog2 = 8.f;             // O rescaled only when a row max grows past 2^8 in p
constexpr int kPReady = 1, kPFree = 2;              // named barriers between the two math warpgroups (0: __syncthreads)

// Byte offsets in the (1024-aligned) dynamic shared memory.
struct Smem {
  static constexpr int kPanels = 9, kPanelBytes = 64 * 128, kTileBytes = kPanels * kPanelBytes;
  static constexpr int kStages = 2;
  static constexpr int kQ = 0, kK = kTileBytes, kP = kK + kStages * kTileBytes;
  static constexpr int kFactors = kP + kPanelBytes;    // float alpha[64] (per block), inv_l[64] (at the end)
  static constexpr int kBars = kFactors + 2 * 64 * 4;  // q_full, full[2], empty[2]
  static constexpr int kBytes = kBars + 8 * 8;
  static constexpr int kAlloc = kBytes + 1024;  // room to align the base up to 1024 (swizzle atoms)
};
static_assert(Smem::kAlloc <= 227 * 1024, "the MLA decode kernel's shared memory exceeds an H100's 227 KB");
static_assert(kQkDim == Smem::kPanels * 64 && kVDim == 8 * 64 && kTileRows == 64 && kBlockKeys == 64, "tile shape");

// ---- copies -------------------------------------------------------------------------------------
// 16 bytes global -> shared, or 16 zero bytes when !valid (src is then not read).
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void *src, bool valid) {
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}
// One arrival on `bar` once every cp.async this thread issued so far has landed (the barrier's
// expected count includes it: .noinc).
__device__ __forceinline__ void cp_async_arrive_noinc(uint64_t *bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

// Chunk c (0..71) of row r of a 64-row tile of 576-column rows, 128B-swizzled panels: from row_a for
// the first a_panels panels, else from row_b; zeros when !ok (then `fallback`, a valid address, is named).
template <class T>
__device__ __forceinline__ void copy_chunk(uint8_t *tile, int r, int c, const T *row_a, const T *row_b, int a_panels,
                                           bool ok, const void *fallback) {
  const int pnl = c >> 3, cc = c & 7;
  const T *src = pnl < a_panels ? row_a + pnl * 64 + cc * 8 : row_b + (pnl - a_panels) * 64 + cc * 8;
  cp_async_16(smem_addr(tile + pnl * Smem::kPanelBytes + r * 128 + ((cc ^ (r & 7)) << 4)), ok ? src : fallback, ok);
}

// D (64 x 128) += A (64 x 16, K-major) * B (16 x 128, N-major), both in shared memory: P V of the
// values warpgroup.
template <class T>
__device__ __forceinline__ void wgmma_ss_tn128(float (&d)[64], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  if constexpr (is_bf16<T>)
    FB_WGMMA_SS_T("128", FB_WGMMA_D64, "64", "65", "66", "bf16", "0", "1", FB_WGMMA_OUT64(d));
  else
    FB_WGMMA_SS_T("128", FB_WGMMA_D64, "64", "65", "66", "f16", "0", "1", FB_WGMMA_OUT64(d));
}

// ---- the CTA's work -----------------------------------------------------------------------------
struct Work {
  int b, split, row0;
  int64_t total;   // the entry's keys (cache_seqlens, kept inside the cache's capacity)
  int64_t lo, hi;  // this split's keys
  int n_blocks;
};

// The end of the keys row `row` of the entry sees (bottom-right causal, or all of them).
__device__ __forceinline__ int64_t row_key_end(const MlaParams &p, int64_t total, int row) {
  return kvcache::visible_keys(total, 0, p.seqlen_q, row / p.heads_q, p.causal, false, -1, -1).hi;
}

__device__ __forceinline__ Work work_of(const MlaParams &p) {
  Work w;
  w.row0 = int(blockIdx.x) * kTileRows, w.split = int(blockIdx.y), w.b = int(blockIdx.z);
  const int64_t len = p.cache_seqlens[w.b];  // a bad trusted table reads nothing outside the cache
  w.total = len < 0 ? 0 : min(len, p.capacity);
  const int row_last = min(p.rows, w.row0 + kTileRows) - 1;  // the tile's last row sees the most keys
  const int64_t tile_hi = max(int64_t(0), min(w.total, row_key_end(p, w.total, row_last)));
  const int64_t per_split = ((tile_hi + p.num_splits - 1) / p.num_splits + kBlockKeys - 1) / kBlockKeys * kBlockKeys;
  w.lo = int64_t(w.split) * per_split;
  w.hi = min(tile_hi, w.lo + per_split);
  w.n_blocks = w.hi > w.lo ? int((w.hi - w.lo + kBlockKeys - 1) / kBlockKeys) : 0;
  return w;
}

// ---- warpgroup 0: the loads ---------------------------------------------------------------------
template <class T>
__device__ __forceinline__ void producer(const MlaParams &p, uint8_t *smem, uint64_t *bars, const Work &w) {
  if (w.n_blocks == 0) return;  // the math warpgroups wait for nothing either
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
  const int chunks = lane < 8 ? 3 : 2;  // 72 chunks a row over 32 lanes
  uint64_t *q_full = bars, *full = bars + 1, *empty = bars + 3;
  const T *q = static_cast<const T *>(p.q), *qv = static_cast<const T *>(p.qv);
  // Q: this warp's 16 rows of the tile (rows past the entry's zero-filled).
#pragma unroll 1
  for (int rr = 0; rr < 16; ++rr) {
    const int r = warp * 16 + rr, row = w.row0 + r;
    const bool ok = row < p.rows;
    const int i = ok ? row / p.heads_q : 0, h = ok ? row % p.heads_q : 0;
    const T *ra = q + w.b * p.q_stride[0] + i * p.q_stride[1] + h * p.q_stride[2];
    const T *rb = qv ? qv + w.b * p.qv_stride[0] + i * p.qv_stride[1] + h * p.qv_stride[2] : ra;
#pragma unroll
    for (int x = 0; x < 3; ++x)
      if (x < chunks) copy_chunk(smem + Smem::kQ, r, lane + 32 * x, ra, rb, p.a_panels, ok, q);
  }
  cp_async_arrive_noinc(q_full);

  const T *kc = static_cast<const T *>(p.k_cache), *vc = static_cast<const T *>(p.v_cache);
  int64_t entry = w.b;
  bool entry_ok = true;
  if (!p.block_table) {
    if (p.cache_batch_idx) entry = p.cache_batch_idx[w.b];
    entry_ok = entry >= 0 && entry < p.cache_entries;
  }
#pragma unroll 1
  for (int blk = 0; blk < w.n_blocks; ++blk) {
    const int stage = blk & 1;
    // Lane l resolves row l % 16 of this warp's 16: element offsets in k_cache and v_cache.
    const int64_t key = w.lo + int64_t(blk) * kBlockKeys + warp * 16 + (lane & 15);
    bool ok = key < w.hi;
    int64_t k_off = 0, v_off = 0;
    if (ok) {
      if (p.block_table) {
        const int64_t page = key / p.page_size, in_page = key - page * p.page_size;
        const int64_t e = p.block_table[w.b * p.block_table_stride + page];
        ok = e >= 0 && e < p.cache_entries;
        k_off = e * p.k_stride[0] + in_page * p.k_stride[1];
        v_off = e * p.v_stride[0] + in_page * p.v_stride[1];
      } else {  // key < hi <= capacity = the entry's rows
        ok = entry_ok;
        k_off = entry * p.k_stride[0] + key * p.k_stride[1];
        v_off = entry * p.v_stride[0] + key * p.v_stride[1];
      }
    }
    // The stage's previous block (blk - 2) has been read by both math warpgroups.
    if (blk >= Smem::kStages) mbar_wait(empty + stage, uint32_t((blk >> 1) - 1) & 1u);
    uint8_t *tile = smem + Smem::kK + stage * Smem::kTileBytes;
#pragma unroll 4
    for (int rr = 0; rr < 16; ++rr) {
      const int64_t ka = __shfl_sync(0xffffffffu, k_off, rr), va = __shfl_sync(0xffffffffu, v_off, rr);
      const bool row_ok = __shfl_sync(0xffffffffu, int(ok), rr) != 0;
#pragma unroll
      for (int x = 0; x < 3; ++x)
        if (x < chunks) copy_chunk(tile, warp * 16 + rr, lane + 32 * x, kc + ka, vc + va, p.a_panels, row_ok, kc);
    }
    cp_async_arrive_noinc(full + stage);
  }
  cp_async_wait_all();  // nothing in flight when the warpgroup leaves
}

// ---- the math warpgroups ------------------------------------------------------------------------
// Scores at or past each row's end of keys to -inf; end0 / end1 relative to this thread's first column.
__device__ __forceinline__ void mask_tail(float (&s)[32], int end0, int end1) {
#pragma unroll
  for (int i = 0; i < 32; ++i)
    if (acc_col(i) >= (acc_half(i) ? end1 : end0)) s[i] = -INFINITY;
}
__device__ __forceinline__ int relative_end(int64_t end, int64_t first_col) {
  return int(max(int64_t(-1), min(end - first_col, int64_t(kBlockKeys + 1))));
}

// P (this thread's fragments) into the 64 x 64 P tile, K-major with the 128B swizzle (one panel).
__device__ __forceinline__ void store_p(uint32_t tile, const uint32_t (&pa)[16], int warp, int g, int q4) {
#pragma unroll
  for (int k = 0; k < 16; ++k) {
    const int row = warp * 16 + g + 8 * acc_half(2 * k), col = acc_col(2 * k) + 2 * q4;
    const uint32_t addr = swizzled_128b(tile, 64, row, col) + (col & 7) * 2;
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(pa[k]) : "memory");
  }
}

// This warpgroup's 256 columns of O (from col_base) times inv_l, to o (one split) or the split
// workspace in fp32; the scores warpgroup also writes the LSE.
template <class T>
__device__ __forceinline__ void store_o(const MlaParams &p, const Work &w, const float (&o)[128], const float (&inv)[2],
                                        const float (&lse)[2], int col_base, int warp, int g, int q4, bool with_lse) {
  const int64_t rows_total = int64_t(p.batch) * p.heads_q * p.seqlen_q;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = w.row0 + warp * 16 + g + 8 * h;
    if (row >= p.rows) continue;
    const int i = row / p.heads_q, hq = row % p.heads_q;
    const int64_t out_row = (int64_t(w.b) * p.heads_q + hq) * p.seqlen_q + i;  // the LSE layout
    if (p.num_splits == 1) {
      T *dst = static_cast<T *>(p.o) + w.b * p.o_stride[0] + i * p.o_stride[1] + hq * p.o_stride[2] + col_base + 2 * q4;
#pragma unroll
      for (int x = 0; x < 128; x += 2)
        if (acc_half(x % 64) == h)
          *reinterpret_cast<uint32_t *>(dst + (x / 64) * 128 + acc_col(x % 64)) =
              pack2<T>(o[x] * inv[h], o[x + 1] * inv[h]);
      if (with_lse && q4 == 0 && p.lse) p.lse[out_row] = lse[h];
    } else {
      float *dst = p.o_partial + (int64_t(w.split) * rows_total + out_row) * kVDim + col_base + 2 * q4;
#pragma unroll
      for (int x = 0; x < 128; x += 2)
        if (acc_half(x % 64) == h)
          *reinterpret_cast<float2 *>(dst + (x / 64) * 128 + acc_col(x % 64)) =
              make_float2(o[x] * inv[h], o[x + 1] * inv[h]);
      if (with_lse && q4 == 0) p.lse_partial[int64_t(w.split) * rows_total + out_row] = lse[h];
    }
  }
}

// Warpgroup 1: S, softmax, P for both, O[:, 0:256].
template <class T>
__device__ __forceinline__ void score_group(const MlaParams &p, uint8_t *smem, uint64_t *bars, const Work &w) {
  const int t = int(threadIdx.x) - 128, warp = t >> 5, lane = t & 31, g = lane >> 2, q4 = lane & 3;
  uint64_t *q_full = bars, *full = bars + 1, *empty = bars + 3;
  float *alpha_sm = reinterpret_cast<float *>(smem + Smem::kFactors), *inv_sm = alpha_sm + 64;
  const uint32_t base = smem_addr(smem);
  const uint64_t q_desc = make_smem_desc(base + Smem::kQ, 16, 1024);
  const uint64_t k_desc = make_smem_desc(base + Smem::kK, 16, 1024);
  // V: this warpgroup's four panels, LBO one panel, SBO eight rows.
  const uint64_t v_desc = make_smem_desc(base + Smem::kK + p.v_panel * Smem::kPanelBytes, Smem::kPanelBytes, 8 * 128);
  const uint32_t p_tile = base + Smem::kP;
  int rloc[2];
  int64_t end[2];  // the keys each of this thread's rows sees end here (at most the split's end)
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    rloc[h] = warp * 16 + g + 8 * h;
    const int row = w.row0 + rloc[h];
    end[h] = row < p.rows ? min(w.hi, row_key_end(p, w.total, row)) : w.hi;
  }
  float o[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  uint32_t pa[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) pa[i] = 0u;
  if (w.n_blocks > 0) mbar_wait(q_full, 0);
#pragma unroll 1
  for (int blk = 0; blk < w.n_blocks; ++blk) {
    const int stage = blk & 1;
    const uint32_t stage_off = uint32_t(stage) * Smem::kTileBytes;
    mbar_wait(full + stage, uint32_t(blk >> 1) & 1u);
    fence_view_async_shared();  // the cp.async bytes, written by the generic proxy, to wgmma's
    float s[32];
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < kQkDim / 16; ++k) {
      const uint32_t off = uint32_t(k >> 2) * Smem::kPanelBytes + uint32_t(k & 3) * 32;
      wgmma_ss<64, T>(s, desc_advance(q_desc, off), desc_advance(k_desc, stage_off + off), k > 0);
    }
    wgmma_commit();
    if (blk > 0) {  // the previous block's P V has completed: its stage is free of this warpgroup
      wgmma_wait<1>();
      fence_operands(o);
      fence_operands(pa);
      if (lane == 0) mbar_arrive(empty + (stage ^ 1));
    }
    wgmma_wait<0>();
    fence_operands(s);
    const int64_t block0 = w.lo + int64_t(blk) * kBlockKeys;
    if (block0 + kBlockKeys > min(end[0], end[1]))
      mask_tail(s, relative_end(end[0], block0 + 2 * q4), relative_end(end[1], block0 + 2 * q4));
    float alpha[2];
    softmax_update(s, m, l, alpha, p.scale_log2, kLazyRescaleLog2);
    rescale_rows(o, alpha);
    scores_to_a_fragments<T>(s, pa);
    named_barrier_sync(kPFree, 256);  // the values warpgroup has read the previous P and factors
    store_p(p_tile, pa, warp, g, q4);
    if (q4 == 0) alpha_sm[rloc[0]] = alpha[0], alpha_sm[rloc[1]] = alpha[1];
    fence_view_async_shared();
    named_barrier_arrive(kPReady, 256);
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < kBlockKeys / 16; ++k)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh)
        wgmma_rs<128, T>(reinterpret_cast<float(&)[64]>(o[hh * 64]), reinterpret_cast<const uint32_t(&)[4]>(pa[4 * k]),
                         desc_advance(v_desc,
                                      stage_off + uint32_t(k) * 16 * 128 + uint32_t(hh) * 2 * Smem::kPanelBytes),
                         1);
    wgmma_commit();
  }
  wgmma_wait<0>();
  fence_operands(o);
  fence_operands(pa);
  float inv[2], lse[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float total = quad_sum(l[h]);
    const bool none = !(total > 0.f);
    inv[h] = none ? 0.f : 1.f / total;
    lse[h] = none ? -INFINITY : m[h] * p.scale + logf(total);
  }
  named_barrier_sync(kPFree, 256);
  if (q4 == 0) inv_sm[rloc[0]] = inv[0], inv_sm[rloc[1]] = inv[1];
  named_barrier_arrive(kPReady, 256);
  store_o<T>(p, w, o, inv, lse, 0, warp, g, q4, true);
}

// Warpgroup 2: O[:, 256:512] from the P tile.
template <class T>
__device__ __forceinline__ void value_group(const MlaParams &p, uint8_t *smem, uint64_t *bars, const Work &w) {
  const int t = int(threadIdx.x) - 256, warp = t >> 5, lane = t & 31, g = lane >> 2, q4 = lane & 3;
  uint64_t *full = bars + 1, *empty = bars + 3;
  const float *alpha_sm = reinterpret_cast<const float *>(smem + Smem::kFactors), *inv_sm = alpha_sm + 64;
  const uint32_t base = smem_addr(smem);
  const uint64_t p_desc = make_smem_desc(base + Smem::kP, 16, 1024);
  const uint64_t v_desc =
      make_smem_desc(base + Smem::kK + (p.v_panel + 4) * Smem::kPanelBytes, Smem::kPanelBytes, 8 * 128);
  const int r0 = warp * 16 + g, r1 = r0 + 8;
  float o[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.f;
  named_barrier_arrive(kPFree, 256);  // P starts free
#pragma unroll 1
  for (int blk = 0; blk < w.n_blocks; ++blk) {
    const int stage = blk & 1;
    const uint32_t stage_off = uint32_t(stage) * Smem::kTileBytes;
    named_barrier_sync(kPReady, 256);
    const float alpha[2] = {alpha_sm[r0], alpha_sm[r1]};
    rescale_rows(o, alpha);
    mbar_wait(full + stage, uint32_t(blk >> 1) & 1u);
    fence_view_async_shared();
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < kBlockKeys / 16; ++k)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh)
        wgmma_ss_tn128<T>(reinterpret_cast<float(&)[64]>(o[hh * 64]), desc_advance(p_desc, uint32_t(k) * 32),
                          desc_advance(v_desc,
                                       stage_off + uint32_t(k) * 16 * 128 + uint32_t(hh) * 2 * Smem::kPanelBytes),
                          1);
    wgmma_commit();
    wgmma_wait<0>();
    fence_operands(o);
    if (lane == 0) mbar_arrive(empty + stage);
    named_barrier_arrive(kPFree, 256);
  }
  named_barrier_sync(kPReady, 256);  // the rows' 1 / l
  const float inv[2] = {inv_sm[r0], inv_sm[r1]}, lse[2] = {0.f, 0.f};
  store_o<T>(p, w, o, inv, lse, 256, warp, g, q4, false);
}

template <class T>
__global__ void __launch_bounds__(kThreads, 1) mla_decode_sm90_kernel(const __grid_constant__ MlaParams p) {
  extern __shared__ uint8_t smem_raw[];
  uint8_t *smem = reinterpret_cast<uint8_t *>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint64_t *bars = reinterpret_cast<uint64_t *>(smem + Smem::kBars);
  if (threadIdx.x == 0) {
    mbar_init(bars, 128);  // q_full: the producer's 128 threads
    for (int s = 0; s < Smem::kStages; ++s) {
      mbar_init(bars + 1 + s, 128);  // full: the producer's 128 threads
      mbar_init(bars + 3 + s, 8);    // empty: the 8 math warps
    }
    mbar_init_fence();
  }
  __syncthreads();
  const Work w = work_of(p);
  const int wg = __shfl_sync(0xffffffffu, int(threadIdx.x) / 128, 0);
  if (wg == 0) {
    setmaxnreg_dec<kProducerRegs>();
    producer<T>(p, smem, bars, w);
  } else {
    setmaxnreg_inc<kMathRegs>();
    if (wg == 1)
      score_group<T>(p, smem, bars, w);
    else
      value_group<T>(p, smem, bars, w);
  }
}

}  // namespace flashbox::sm90::mla
