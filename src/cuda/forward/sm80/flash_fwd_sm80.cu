// FlashAttention-2 forward for sm_80 and newer (Dao 2023, "FlashAttention-2", §3.1 Algorithm 1 and
// §3.2 parallelism), written with the warp-level tensor-core instructions of Ampere:
//   - one CTA per (batch*head, block of kBlockM query rows), a 1-D grid in this order: the
//     (batch, head) pairs are cut into sections; inside a section the query blocks go from the last
//     (the longest under a causal mask) to the first, the section's heads fastest. One section (the
//     default) starts every head's heavy CTAs first; when the K/V of all heads exceed the L2, a few
//     heads per section keep their K/V in L2 (choose_section_heads, a makespan model, picks how many);
//   - the Q tile is copied to shared memory once; K/V tiles of kBlockN keys stream through a
//     kStages-deep cp.async ring (K and V of one tile form one commit group);
//   - each warp owns kBlockM/kWarps query rows: S = Q K^T (mma.sync.m16n8k16, fp32 accumulate) stays
//     in registers, the online softmax (running max m and sum l in base 2, exp2 with the scale folded
//     with log2(e)) rescales the O accumulator, P is re-packed from the S registers into the A operand
//     of O += P V (V read with ldmatrix.trans); O and l are rescaled only when some row's max grows by
//     more than 2^8 (exact: O and l share the stale max until then);
//   - masks (cuda/common/score_mods.cuh, core/masks.hpp's rules): causal is a window with right = 0;
//     K/V tiles wholly outside every row's window [key_begin, key_end) are never visited, only tiles
//     that cross a window edge or the end of the keys are masked element by element;
//   - softcap and ALiBi are run-time (uniform branches, no instantiations): with either, the S tile is
//     turned into natural-unit scores x = alibi(cap(scale * s)) before the mask, and the exponent's
//     multiplier becomes log2(e) instead of scale * log2(e);
//   - head_dim: an instantiation (64, 128 or 256) serves every multiple of 8 up to it: columns past
//     the call's head_dim are loaded as zeros (cp.async src-size 0) and never stored;
//   - the extension's mask families (cuda/common/mask_ext.cuh, run-time fields of p.ext, in a
//     kernel of their own, kExt, so the plain kernel keeps its registers): attention_chunk narrows each row's window; seqused shortens the sequence;
//     a prefix widens the tile range to key 0; document ids narrow it to the keys whose ids lie
//     within the tile's rows' id range (one scan of the ids per CTA), and with documents or a prefix
//     every visited tile is masked element by element. A block mask (FlexAttention's BlockMask,
//     block sizes multiples of the tiles: the plan checks) replaces the tile range with the CTA's
//     row of the lists: the K/V tiles of its partial blocks (masked by the element rule and, with a
//     mask mod, the bit tile of the entry, p.ext.mod_bits), then of its full blocks (no mask but the
//     end of the keys); an index out of range is skipped;
//   - variable-length batches: the grid covers (query blocks of max_seqlen_q, sequences x heads); a
//     CTA reads its sequence's span from cu_seqlens (cuda/common/varlen_span.cuh, clamped) and exits
//     when its block starts past the sequence's end;
//   - finalize: O / l written in the input dtype, LSE = (m + log2 l) * ln 2; a row that saw no key
//     gets O = 0 and LSE = -inf; rows past seqlen_q are never written. A learnable sink joins m and l
//     here (cuda/common/sink.cuh: m' = max(m, sink log2 e), l' = l 2^(m - m') + 2^(sink log2 e - m'),
//     O scaled by 2^(m - m') / l'), so a row that saw no key gets O = 0 and LSE = the sink.
// Shared-memory tiles are row-major [row][head_dim] with 16-byte chunks XOR-swizzled by (row % 8), so
// both the cp.async writes and the 8-row ldmatrix reads are free of bank conflicts.
// Tile shapes (flash_fwd_traits.hpp, chosen by measurement in docs/perf-history.md):
//   d=64: 128x128 tiles, 4 warps, 2 stages, Q re-read from smem (frees the registers a 128-key S
//   tile needs; measured 5% faster at T=16384 than 64-key S tiles with Q in registers);
//   d=128: 128x64 tiles, 4 warps, 2 stages, Q re-read from smem at every K tile (a 64-key S tile
//   halves those re-reads against 32 keys; no spill since the O/LSE pointers are formed after the
//   K/V loop, 255 registers);
//   d=256: 128x32 tiles, 8 warps of 16 rows, 2 stages, Q re-read from smem (chosen to fit, not
//   measured: see TraitsD256).
// Arguments are validated in src/api: fp16/bf16, head_dim a multiple of 8 up to 256, 16-byte aligned
// pointers, strides multiples of 8 elements, heads_q a multiple of heads_kv; lse may be NULL.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <functional>
#include <queue>
#include <string>
#include <vector>

#include "cuda/common/cp_async.cuh"
#include "cuda/common/element_type.cuh"
#include "cuda/common/launch_attributes.hpp"
#include "cuda/common/ldmatrix.cuh"
#include "cuda/common/mma.cuh"
#include "cuda/common/score_mods.cuh"
#include "cuda/common/sink.cuh"
#include "cuda/common/softmax_math.cuh"
#include "cuda/common/varlen_span.cuh"
#include "cuda/forward/sm80/flash_fwd_launch.hpp"
#include "cuda/forward/sm80/flash_fwd_traits.hpp"

namespace flashbox::cuda {
namespace {

// Byte offset of 16-byte chunk `chunk` of row `row` in a swizzled [rows][kHeadDim] tile.
template <class Tr>
__device__ __forceinline__ uint32_t swizzled_offset(int row, int chunk) {
  return uint32_t(row * Tr::kHeadDim * 2 + ((chunk ^ (row & 7)) << 4));
}

// Copies rows [row0, row0 + kRows) of a [seq][kHeadDim] head (row stride `stride` elements) into a
// swizzled tile; rows at or past `row_end` are zero-filled (a zero V row keeps 0 * garbage out of O), and
// so are the chunks at or past `chunk_end` (head_dim / 8: the columns a smaller head_dim lacks).
template <class Tr, int kRows, typename Element>
__device__ __forceinline__ void load_tile_async(uint32_t tile, const Element *head, int64_t stride, int row0,
                                                int row_end, int chunk_end) {
  constexpr int kRowsPerPass = Tr::kThreads / Tr::kChunksPerRow;
  const int chunk = threadIdx.x % Tr::kChunksPerRow;
  const int first = threadIdx.x / Tr::kChunksPerRow;
#pragma unroll
  for (int pass = 0; pass < kRows / kRowsPerPass; ++pass) {
    const int r = first + pass * kRowsPerPass;
    const bool valid = row0 + r < row_end && chunk < chunk_end;
    const Element *src = valid ? head + int64_t(row0 + r) * stride + chunk * 8 : head;
    cp_async_16(tile + swizzled_offset<Tr>(r, chunk), src, valid);
  }
}

// Values read from the parameter space where they are used, so that no register holds them through
// the K/V loop (ptxas, sm_90a: D128 spills 28 B with them in registers, 0 without): the 16-byte
// chunks of the call's head_dim, and the exponent's multiplier of a score (scale * log2e for raw
// scores, log2e for the natural-unit scores of softcap / ALiBi).
__device__ __forceinline__ int head_chunks(const FlashFwdParams &p) { return p.head_dim >> 3; }
__device__ __forceinline__ float score_multiplier(const FlashFwdParams &p) {
  return p.transforms ? kLog2e : p.scale_log2;
}

// The online softmax steps of one S tile (FlashAttention-2 §3.1 in base 2), named as the Hopper
// kernel's. A thread holds rows row0 + mt*16 + 8r (r = 0, 1) of each m16 tile and, in C tile j, the
// columns j*8 + e past its first column (e = 0, 1). Scores stay raw: the scale is folded into one FFMA
// per element, p = exp2(s * scale_log2 - m), with m the running max of s * scale_log2 (base-2 units).
// For a negative scale the largest scaled score is the smallest raw one, so the max runs over -s, and
// masked entries hold +inf (scaled: -inf).

// >>> report:online_softmax
// Sets the scores a row may not see to `masked`: keys outside the row's window [key_begin, key_end)
// (causal: right = 0), which ends at seqlen_k at the latest. The thread's rows start at row0, its
// first key at col0 (= key0 + 2t).
template <class Tr>
__device__ __forceinline__ void mask_columns(float (&acc_s)[Tr::kMTiles][Tr::kSTiles][4], const DeviceMods &m, int row0,
                                             int col0, int shift, int seqlen_k, float masked) {
#pragma unroll
  for (int mt = 0; mt < Tr::kMTiles; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = row0 + mt * 16 + 8 * r;
      // this lane's element (j, e) is key j*8 + e past its first column
      const int lo = mods_key_begin(m, row, shift, seqlen_k) - col0;
      const int hi = mods_key_end(m, row, shift, seqlen_k) - col0;
#pragma unroll
      for (int j = 0; j < Tr::kSTiles; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          if (j * 8 + e < lo || j * 8 + e >= hi) acc_s[mt][j][2 * r + e] = masked;
    }
}

// The extension's element mask (cuda/common/mask_ext.cuh): a full block of a block mask admits
// every key before seqlen_k; otherwise the element rule (documents, prefix, window, chunk), and in a
// partial block with a mask mod also the mod's bit (`bits`: the block's bit tile, null without).
template <class Tr>
__device__ __forceinline__ void mask_ext_columns(float (&acc_s)[Tr::kMTiles][Tr::kSTiles][4], const FlashFwdParams &p,
                                                 const int32_t *doc_q, const int32_t *doc_k, int prefix, bool full,
                                                 const uint32_t *bits, int row0, int col0, int shift, int seqlen_q,
                                                 int seqlen_k, float masked) {
#pragma unroll
  for (int mt = 0; mt < Tr::kMTiles; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = row0 + mt * 16 + 8 * r;
#pragma unroll
      for (int j = 0; j < Tr::kSTiles; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int key = col0 + j * 8 + e;
          const bool seen = full
                                ? key < seqlen_k
                                : ext_visible(p.mods, p.ext, doc_q, doc_k, prefix, row, key, shift, seqlen_q, seqlen_k) &&
                                      mod_bit(p.ext, bits, row, key);
          if (!seen) acc_s[mt][j][2 * r + e] = masked;
        }
    }
}

// Softcap and ALiBi (score_mods.cuh): raw scores s become natural-unit x = alibi(cap(scale * s)).
template <class Tr>
__device__ __forceinline__ void transform_scores(float (&acc_s)[Tr::kMTiles][Tr::kSTiles][4], const FlashFwdParams &p,
                                                 float slope, int row0, int col0, int shift) {
  const bool capped = p.mods.capped(), alibi = p.mods.alibi();
#pragma unroll
  for (int mt = 0; mt < Tr::kMTiles; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int j = 0; j < Tr::kSTiles; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float x = acc_s[mt][j][2 * r + e] * p.scale;
          if (capped) x = mods_cap(p.mods, x);
          if (alibi) x += mods_alibi_bias(slope, row0 + mt * 16 + 8 * r, col0 + j * 8 + e, shift);
          acc_s[mt][j][2 * r + e] = x;
        }
}

// Folds the tile's row maxima into m. The running max moves only when some row of the warp grows by
// more than 2^kStaleMax (base 2): until then exp2(s - m) <= 2^kStaleMax, harmless in fp32 and in the
// 16-bit P, and the rescale of O and l (kOTiles*4 multiplies per row pair) is skipped. The result is
// exact: O and l share m.
template <class Tr>
__device__ __forceinline__ void softmax_update(const float (&acc_s)[Tr::kMTiles][Tr::kSTiles][4],
                                               float (&acc_o)[Tr::kMTiles][Tr::kOTiles][4],
                                               float (&row_max)[Tr::kMTiles][2], float (&row_sum)[Tr::kMTiles][2],
                                               float score_mul) {
  constexpr float kStaleMax = 8.f;
  const bool positive_scale = score_mul > 0.f;
  const float scale_abs = fabsf(score_mul);
  float tile_max[Tr::kMTiles][2];
  bool grows = false;
#pragma unroll
  for (int mt = 0; mt < Tr::kMTiles; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
      if (positive_scale) {
#pragma unroll
        for (int j = 0; j < Tr::kSTiles; ++j) mx = fmaxf(mx, fmaxf(acc_s[mt][j][2 * r], acc_s[mt][j][2 * r + 1]));
      } else {
#pragma unroll
        for (int j = 0; j < Tr::kSTiles; ++j) mx = fmaxf(mx, fmaxf(-acc_s[mt][j][2 * r], -acc_s[mt][j][2 * r + 1]));
      }
      tile_max[mt][r] = quad_max(mx) * scale_abs;
      grows |= tile_max[mt][r] > row_max[mt][r] + kStaleMax;
    }
  }
  if (__any_sync(0xffffffffu, grows)) {
#pragma unroll
    for (int mt = 0; mt < Tr::kMTiles; ++mt) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float m_new = fmaxf(row_max[mt][r], tile_max[mt][r]);
        // A row that has seen only masked keys keeps m = -inf (alpha = exp2(-inf) = 0, acc is 0).
        const float alpha = fast_exp2(row_max[mt][r] - (m_new == -INFINITY ? 0.f : m_new));
        row_max[mt][r] = m_new;
        row_sum[mt][r] *= alpha;
#pragma unroll
        for (int j = 0; j < Tr::kOTiles; ++j) {
          acc_o[mt][j][2 * r] *= alpha;
          acc_o[mt][j][2 * r + 1] *= alpha;
        }
      }
    }
  }
}

// s becomes p = exp2(s * score_mul - m) (score_mul: scale * log2e, or log2e for transformed scores);
// each row's lane-partial sum of p is added to l (summed over the quad at the end).
template <class Tr>
__device__ __forceinline__ void exponentiate(float (&acc_s)[Tr::kMTiles][Tr::kSTiles][4],
                                             const float (&row_max)[Tr::kMTiles][2], float (&row_sum)[Tr::kMTiles][2],
                                             float score_mul) {
#pragma unroll
  for (int mt = 0; mt < Tr::kMTiles; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      // m = -inf only while a row has seen nothing but masked keys: subtract 0, exp2(-inf) = 0.
      const float neg_m = row_max[mt][r] == -INFINITY ? 0.f : -row_max[mt][r];
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < Tr::kSTiles; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          acc_s[mt][j][2 * r + e] = fast_exp2(fmaf(acc_s[mt][j][2 * r + e], score_mul, neg_m));
          sum += acc_s[mt][j][2 * r + e];
        }
      }
      row_sum[mt][r] += sum;
    }
  }
}
// <<< report:online_softmax

// kExt: the extension's mask families (p.ext) are compiled in; a call without them runs the kernel
// without, whose code and registers are the plain kernel's (ptxas, sm_80 and sm_90a: d64 16 B of
// spills, d128 none, as before the mask families; as a run-time branch they spilled d64 80 B and
// d128 8 B on sm_80). The !kExt expressions of the tile walk are kept as they were for that reason.
template <typename Element, class Tr, bool kExt>
__global__ void __launch_bounds__(Tr::kThreads, Tr::kMinBlocksPerSM) flash_fwd_sm80_kernel(const FlashFwdParams p) {
  constexpr bool kBf16 = ElementTraits<Element>::is_bf16;
  constexpr int kM = Tr::kBlockM, kN = Tr::kBlockN, kD = Tr::kHeadDim;
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t sQ = smem_addr(smem);
  const uint32_t sK = sQ + Tr::kQTileElems * 2;
  const uint32_t sV = sK + Tr::kStages * Tr::kKVTileElems * 2;

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  // CTA order (1-D grid): (batch, head) pairs are cut into sections of p.section_heads; inside a
  // section the longest query blocks come first (m descending), the section's heads fastest, so the
  // K/V of the heads in flight stay in L2 while the heavy causal blocks still start early.
  // section_heads = batch * heads_q is the order of one section: every head's last block first.
  const int num_m = (p.seqlen_q + kM - 1) / kM;
  const int heads_total = p.batch * p.heads_q;
  const int section = int(blockIdx.x) / (num_m * p.section_heads);
  const int in_rank = int(blockIdx.x) - section * num_m * p.section_heads;
  const int in_section = min(p.section_heads, heads_total - section * p.section_heads);
  const int m_rank = in_rank / in_section;
  const int bh = section * p.section_heads + (in_rank - m_rank * in_section);
  const int b = bh / p.heads_q, h = bh % p.heads_q, hk = h / p.group;
  const int m0 = (num_m - 1 - m_rank) * kM;
  int sq = p.seqlen_q, sk = p.seqlen_k;
  int q_tok0 = 0, k_tok0 = 0;  // the sequence's first token in the packed tensors (varlen)
  const Element *q = static_cast<const Element *>(p.q) + h * p.q_head;
  const Element *k = static_cast<const Element *>(p.k) + hk * p.k_head;
  const Element *v = static_cast<const Element *>(p.v) + hk * p.v_head;
  if (p.cu_seqlens_q) {  // varlen: this sequence's tokens; the grid covers the longest
    const VarlenSpan s = varlen_span(p.cu_seqlens_q, p.cu_seqlens_k, b, p.total_q, p.total_k, sq, sk);
    if (m0 >= s.seqlen_q) return;  // the whole CTA: nothing loaded, nothing written
    sq = s.seqlen_q, sk = s.seqlen_k, q_tok0 = s.q0, k_tok0 = s.k0;
    q += int64_t(s.q0) * p.q_seq, k += int64_t(s.k0) * p.k_seq, v += int64_t(s.k0) * p.v_seq;
  } else {
    q += b * p.q_batch, k += b * p.k_batch, v += b * p.v_batch;
  }
  if constexpr (kExt) {
    ext_used_lengths(p.ext, b, sq, sk);
    if (m0 >= sq) return;  // rows past the used ones keep what they held
  }
  const int shift = sk - sq;  // bottom-right alignment: query i's diagonal is key i + shift

  // K/V tiles [n_begin, n_end) hold every key some row of this block may see (rows' windows move
  // right with the row); a tile needs the element mask when it is not inside every row's window.
  // ext_key_* are mods_key_* with attention_chunk (the same without it).
  int key_begin = kExt ? ext_key_begin(p.mods, p.ext, m0, shift, sk) : mods_key_begin(p.mods, m0, shift, sk);
  int key_end = kExt ? ext_key_end(p.mods, p.ext, min(m0 + kM, sq) - 1, shift, sk)
                     : mods_key_end(p.mods, min(m0 + kM, sq) - 1, shift, sk);
  // keys below mask_lo / from mask_hi on: some row masks
  const int mask_lo =
      kExt ? ext_key_begin(p.mods, p.ext, m0 + kM - 1, shift, sk) : mods_key_begin(p.mods, m0 + kM - 1, shift, sk);
  const int mask_hi = kExt ? ext_key_end(p.mods, p.ext, m0, shift, sk) : mods_key_end(p.mods, m0, shift, sk);
  const int32_t *doc_q = nullptr, *doc_k = nullptr;  // this sequence's document ids (null: none)
  int prefix = 0;
  BlockRow brow{0, 0, 0};
  int brow_qb = 0;  // the CTA's row of mask blocks
  const bool blocks = kExt && p.ext.blocks();
  if constexpr (kExt) {
    prefix = ext_prefix(p.ext, b, sk);
    if (prefix > 0) key_begin = 0, key_end = max(key_end, prefix);
    if (p.ext.doc_q) {
      doc_q = p.ext.doc_q + (p.cu_seqlens_q ? int64_t(q_tok0) : b * p.ext.doc_q_stride);
      doc_k = p.ext.doc_k + (p.cu_seqlens_q ? int64_t(k_tok0) : b * p.ext.doc_k_stride);
      // Keys of other documents than the block's rows' are never visible: narrow [key_begin,
      // key_end) to the keys whose id lies within the rows' id range (exact for sorted documents).
      __shared__ int doc_bounds[4];  // rows' min and max id, first and last matching key
      if (threadIdx.x == 0)
        doc_bounds[0] = INT_MAX, doc_bounds[1] = INT_MIN, doc_bounds[2] = INT_MAX, doc_bounds[3] = -1;
      __syncthreads();
      int lo = INT_MAX, hi = INT_MIN;
      for (int r = m0 + int(threadIdx.x); r < min(m0 + kM, sq); r += Tr::kThreads)
        lo = min(lo, doc_q[r]), hi = max(hi, doc_q[r]);
      atomicMin(&doc_bounds[0], lo);
      atomicMax(&doc_bounds[1], hi);
      __syncthreads();
      const int id_lo = doc_bounds[0], id_hi = doc_bounds[1];
      int first = INT_MAX, last = -1;
      for (int j = key_begin + int(threadIdx.x); j < key_end; j += Tr::kThreads) {
        const int id = doc_k[j];
        if (id >= id_lo && id <= id_hi) first = min(first, j), last = max(last, j);
      }
      atomicMin(&doc_bounds[2], first);
      atomicMax(&doc_bounds[3], last);
      __syncthreads();
      if (doc_bounds[3] < 0)
        key_begin = key_end = 0;
      else
        key_begin = max(key_begin, doc_bounds[2]), key_end = min(key_end, doc_bounds[3] + 1);
    }
    if (blocks) {  // the lists decide the tiles; the element rule is tested in partial ones
      key_begin = 0, key_end = sk;
      brow_qb = m0 / p.ext.q_block;
      brow = block_row(p.ext, b, h, brow_qb);
    }
  }
  const int n_begin = key_begin / kN;
  const int n_end = max(n_begin, (key_end + kN - 1) / kN);
  // Block masks: each listed block is kv_block / kN K/V tiles, walked partial blocks first.
  const int tiles_per_block = blocks ? p.ext.kv_block / kN : 1;
  const int n_iter = blocks ? (brow.partial + brow.full) * tiles_per_block : n_end - n_begin;
  // The K/V tile of iteration `it` (-1: none, an index out of range or a tile past the keys) and
  // whether it is in a full block. Without a block mask the tiles go from the last to the first:
  // the diagonal (masked) tiles first, then the unmasked bulk.
  auto tile_at = [&](int it, bool *full) -> int {
    *full = false;
    if (!blocks) return n_end - 1 - it;
    const int c = block_entry(p.ext, brow, it / tiles_per_block, full);
    const int n = c * tiles_per_block + it % tiles_per_block;
    return c >= 0 && n * kN < sk ? n : -1;
  };
  const float slope = p.transforms ? mods_slope(p.mods, b, h) : 0.f;

  // This thread's rows: warp_row0 + mt*16 + g (+8), g = lane / 4; its columns in a C tile: 2t, 2t+1.
  const int g = lane / 4, t = lane % 4;
  const int warp_row0 = warp * Tr::kRowsPerWarp;

  float acc_o[Tr::kMTiles][Tr::kOTiles][4];
  float row_max[Tr::kMTiles][2], row_sum[Tr::kMTiles][2];
#pragma unroll
  for (int mt = 0; mt < Tr::kMTiles; ++mt) {
#pragma unroll
    for (int j = 0; j < Tr::kOTiles; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_o[mt][j][e] = 0.f;
    row_max[mt][0] = row_max[mt][1] = -INFINITY;
    row_sum[mt][0] = row_sum[mt][1] = 0.f;
  }

  // ldmatrix lane addressing: A fragments (Q) and V^T read rows +(lane%8) + 8*((lane/8)%2) and chunk
  // +(lane/16); K (B operand, not transposed) reads rows +(lane%8) + 8*(lane/16) and chunk +(lane/8)%2.
  // Tile row bases are multiples of 8, so a lane's swizzle phase is always lane % 8.
  // Chunk c of a row sits at (c ^ (row % 8)) * 16 bytes; with the row part fixed per thread, moving
  // to chunk c + 2*kk is an XOR of the byte offset with kk << 5 (bits the row offset never touches).
  const int a_row = (lane % 8) + 8 * ((lane / 8) % 2), a_chunk = lane / 16;
  const int b_row = (lane % 8) + 8 * (lane / 16), b_chunk = (lane / 8) % 2;
  const uint32_t q_lane = swizzled_offset<Tr>(warp_row0 + a_row, a_chunk);  // + mt * 16 rows
  const uint32_t k_lane = swizzled_offset<Tr>(b_row, b_chunk);              // + np * 16 rows
  const uint32_t v_lane = swizzled_offset<Tr>(a_row, a_chunk);              // + kk * 16 rows
  constexpr uint32_t kRow16Bytes = 16 * kD * 2;

  // >>> report:load_q
  load_tile_async<Tr, kM>(sQ, q, p.q_seq, m0, sq, head_chunks(p));
  cp_async_commit();
#pragma unroll
  for (int s = 0; s < Tr::kStages - 1; ++s) {
    bool full_s;
    const int n = !kExt ? n_end - 1 - s : s < n_iter ? tile_at(s, &full_s) : -1;
    if (kExt ? n >= 0 : n >= n_begin) {
      load_tile_async<Tr, kN>(sK + s * Tr::kKVTileElems * 2, k, p.k_seq, n * kN, sk, head_chunks(p));
      load_tile_async<Tr, kN>(sV + s * Tr::kKVTileElems * 2, v, p.v_seq, n * kN, sk, head_chunks(p));
    }
    cp_async_commit();
  }
  uint32_t q_frag[Tr::kQInRegisters ? Tr::kMTiles : 1][Tr::kQInRegisters ? Tr::kQKSteps : 1][4];
  if constexpr (Tr::kQInRegisters) {
    cp_async_wait<Tr::kStages - 1>();  // the Q group is the oldest
    __syncthreads();
#pragma unroll
    for (int mt = 0; mt < Tr::kMTiles; ++mt)
#pragma unroll
      for (int kk = 0; kk < Tr::kQKSteps; ++kk)
        ldmatrix_x4(q_frag[mt][kk], sQ + ((q_lane + mt * kRow16Bytes) ^ (kk << 5)));
  }
  // <<< report:load_q

  // >>> report:kv_loop
  for (int it = 0; it < n_iter; ++it) {
    bool full = false;
    const int n = kExt ? tile_at(it, &full) : n_end - 1 - it;
    const int stage = it % Tr::kStages;
    cp_async_wait<Tr::kStages - 2>();
    __syncthreads();  // tile `it` is visible to all; every warp is done with the stage refilled next
    {
      bool full_next;
      const int n_next = !kExt                           ? n - (Tr::kStages - 1)
                         : it + Tr::kStages - 1 < n_iter ? tile_at(it + Tr::kStages - 1, &full_next)
                                                         : -1;
      const int st_next = (it + Tr::kStages - 1) % Tr::kStages;
      if (kExt ? n_next >= 0 : n_next >= n_begin) {
        load_tile_async<Tr, kN>(sK + st_next * Tr::kKVTileElems * 2, k, p.k_seq, n_next * kN, sk, head_chunks(p));
        load_tile_async<Tr, kN>(sV + st_next * Tr::kKVTileElems * 2, v, p.v_seq, n_next * kN, sk, head_chunks(p));
      }
      cp_async_commit();  // possibly empty, so the group count stays uniform
    }
    if (kExt && n < 0) continue;  // a block index out of range: nothing to compute (CTA-uniform)
    // The K/V tile is consumed kSubN keys at a time; a step wholly outside the visible keys is skipped.
#pragma unroll
    for (int sub = 0; sub < kN / Tr::kSubN; ++sub) {
      const int key0 = n * kN + sub * Tr::kSubN;
      if (key0 >= key_end) continue;  // (a step before key_begin is masked: kSubN = kBlockN in both tiles)
      const uint32_t sK_tile = sK + stage * Tr::kKVTileElems * 2 + sub * Tr::kSubN * kD * 2;
      const uint32_t sV_tile = sV + stage * Tr::kKVTileElems * 2 + sub * Tr::kSubN * kD * 2;
      // <<< report:kv_loop

      // >>> report:s_tile
      float acc_s[Tr::kMTiles][Tr::kSTiles][4];
#pragma unroll
      for (int mt = 0; mt < Tr::kMTiles; ++mt)
#pragma unroll
        for (int j = 0; j < Tr::kSTiles; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc_s[mt][j][e] = 0.f;
#pragma unroll
      for (int kk = 0; kk < Tr::kQKSteps; ++kk) {
        uint32_t a[Tr::kMTiles][4];
#pragma unroll
        for (int mt = 0; mt < Tr::kMTiles; ++mt) {
          if constexpr (Tr::kQInRegisters) {
#pragma unroll
            for (int e = 0; e < 4; ++e) a[mt][e] = q_frag[mt][kk][e];
          } else {
            ldmatrix_x4(a[mt], sQ + ((q_lane + mt * kRow16Bytes) ^ (kk << 5)));
          }
        }
#pragma unroll
        for (int np = 0; np < Tr::kSTiles / 2; ++np) {
          uint32_t bk[4];
          ldmatrix_x4(bk, sK_tile + ((k_lane + np * kRow16Bytes) ^ (kk << 5)));
#pragma unroll
          for (int mt = 0; mt < Tr::kMTiles; ++mt) {
            mma_m16n16k16<kBf16>(acc_s[mt][2 * np], acc_s[mt][2 * np + 1], a[mt], bk);
          }
        }
      }
      // <<< report:s_tile

      // >>> report:online_softmax
      // The online softmax steps, named as the Hopper kernel's (cuda/hopper/online_softmax.cuh):
      // transform the scores (softcap, ALiBi), mask the tile where it crosses a window edge or the
      // end of the keys, fold its row maxima into m (rescaling O and l when a max grows),
      // exponentiate against m into P and the row sums.
      if (p.transforms) transform_scores<Tr>(acc_s, p, slope, m0 + warp_row0 + g, key0 + 2 * t, shift);
      const float score_mul = score_multiplier(p);
      const float masked = score_mul > 0.f ? -INFINITY : INFINITY;
      if constexpr (!kExt) {
        if (key0 + Tr::kSubN > mask_hi || key0 < mask_lo)
          mask_columns<Tr>(acc_s, p.mods, m0 + warp_row0 + g, key0 + 2 * t, shift, sk, masked);
      } else if (blocks ? !full || key0 + Tr::kSubN > sk
                        : p.ext.elementwise() || key0 + Tr::kSubN > mask_hi || key0 < mask_lo) {
        // A partial block's mod bits: its entry is it / tiles_per_block (partial entries come first).
        const uint32_t *bits = blocks && !full ? mod_tile(p.ext, b, h, brow_qb, it / tiles_per_block) : nullptr;
        mask_ext_columns<Tr>(acc_s, p, doc_q, doc_k, prefix, full, bits, m0 + warp_row0 + g, key0 + 2 * t, shift, sq,
                             sk, masked);
      }
      softmax_update<Tr>(acc_s, acc_o, row_max, row_sum, score_mul);
      exponentiate<Tr>(acc_s, row_max, row_sum, score_mul);
      // <<< report:online_softmax

      // >>> report:pv
#pragma unroll
      for (int kk = 0; kk < Tr::kPVSteps; ++kk) {
        uint32_t a[Tr::kMTiles][4];
#pragma unroll
        for (int mt = 0; mt < Tr::kMTiles; ++mt) {
          a[mt][0] = ElementTraits<Element>::pack(acc_s[mt][2 * kk][0], acc_s[mt][2 * kk][1]);
          a[mt][1] = ElementTraits<Element>::pack(acc_s[mt][2 * kk][2], acc_s[mt][2 * kk][3]);
          a[mt][2] = ElementTraits<Element>::pack(acc_s[mt][2 * kk + 1][0], acc_s[mt][2 * kk + 1][1]);
          a[mt][3] = ElementTraits<Element>::pack(acc_s[mt][2 * kk + 1][2], acc_s[mt][2 * kk + 1][3]);
        }
#pragma unroll
        for (int dp = 0; dp < Tr::kOTiles / 2; ++dp) {
          uint32_t bv[4];
          ldmatrix_x4_trans(bv, sV_tile + ((v_lane + kk * kRow16Bytes) ^ (dp << 5)));
#pragma unroll
          for (int mt = 0; mt < Tr::kMTiles; ++mt) {
            mma_m16n16k16<kBf16>(acc_o[mt][2 * dp], acc_o[mt][2 * dp + 1], a[mt], bv);
          }
        }
      }
      // <<< report:pv
    }  // sub
  }
  cp_async_wait<0>();  // no copy may still target shared memory when the CTA exits
#undef FLASHBOX_CHUNK_END

  // >>> report:finalize
  // O and LSE pointers are formed only now, from bh made opaque to the compiler: otherwise it keeps the
  // decoded (b, h) or the 64-bit pointers live through the K/V loop, where every register is taken
  // (ptxas -v, sm_90a: spills D128 24 B, D64 40 B that way; 0 and 8 B with this).
  int bh_out = bh;
  asm volatile("" : "+r"(bh_out));
  const int b_out = bh_out / p.heads_q, h_out = bh_out % p.heads_q;
  Element *o = static_cast<Element *>(p.o) + h_out * p.o_head;
  float *lse = p.lse;
  if (p.cu_seqlens_q) {  // the span again (re-read, not kept live through the loop)
    const VarlenSpan s =
        varlen_span(p.cu_seqlens_q, p.cu_seqlens_k, b_out, p.total_q, p.total_k, p.seqlen_q, p.seqlen_k);
    o += int64_t(s.q0) * p.o_seq;
    if (lse) lse += int64_t(h_out) * p.total_q + s.q0;
  } else {
    o += b_out * p.o_batch;
    if (lse) lse += int64_t(bh_out) * p.seqlen_q;
  }
  // The sink in the units of row_max (base 2: cuda/common/sink.cuh), read only now (no register
  // holds it through the loop); -inf: none.
  const float sink2 = p.sinks != nullptr ? p.sinks[h_out] * kLog2e : -INFINITY;
#pragma unroll
  for (int mt = 0; mt < Tr::kMTiles; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float l = quad_sum(row_sum[mt][r]), m = row_max[mt][r];
      const float o_mul = p.sinks != nullptr ? fold_sink(m, l, sink2) : 1.f;
      const float inv_l = l > 0.f ? o_mul / l : 0.f;
      const int row = m0 + warp_row0 + mt * 16 + g + 8 * r;
      if (row >= sq) continue;
      Element *orow = o + int64_t(row) * p.o_seq;
#pragma unroll
      for (int j = 0; j < Tr::kOTiles; ++j) {
        if (j * 8 >= p.head_dim) break;  // columns of a smaller head_dim are never stored
        const uint32_t packed =
            ElementTraits<Element>::pack(acc_o[mt][j][2 * r] * inv_l, acc_o[mt][j][2 * r + 1] * inv_l);
        *reinterpret_cast<uint32_t *>(orow + j * 8 + 2 * t) = packed;
      }
      if (lse != nullptr && t == 0) lse[row] = l > 0.f ? (m + __log2f(l)) * kLn2 : -INFINITY;
    }
  }
  // <<< report:finalize
}

// CTA order of a launch (section_heads, see the kernel). One section (every head's last query block
// first) is longest-processing-time-first over the whole grid: the best balance. Small sections keep
// the K/V of few heads in flight, so they are re-read from L2 instead of HBM: +2-4% at T = 8192-16384
// (docs/perf-history.md, v6), but each section's heavy blocks then start later, and where the last ones start
// too late the tail costs up to 25% (T = 1024-4096 with 1-12 heads per section, measured). So: one
// section unless the K/V of all heads exceed twice the L2 (causal only: without the mask every block
// has the same work and the order was not measured), and then the smallest section whose simulated
// makespan is within 0.5% of one section's.
//
// Makespan model: greedy list scheduling of the CTAs, in launch order, onto `slots` resident CTAs;
// a CTA costs its K/V tiles plus one tile for its prologue and epilogue. It reproduces the measured
// pattern of good and bad section sizes (sweep v6).
template <class Tr>
double simulated_makespan(const FlashFwdParams &p, int section_heads, int slots) {
  const int num_m = (p.seqlen_q + Tr::kBlockM - 1) / Tr::kBlockM;
  const int heads_total = p.batch * p.heads_q;
  std::priority_queue<double, std::vector<double>, std::greater<double>> free_at;
  for (int i = 0; i < slots; ++i) free_at.push(0.0);
  double end = 0.0;
  for (int first = 0; first < heads_total; first += section_heads) {
    const int in_section = std::min(section_heads, heads_total - first);
    for (int m_rank = 0; m_rank < num_m; ++m_rank) {
      const int m_block = num_m - 1 - m_rank;
      const int key_end = std::max(0, std::min(p.seqlen_k, (m_block + 1) * Tr::kBlockM + p.seqlen_k - p.seqlen_q));
      const double cost = double((key_end + Tr::kBlockN - 1) / Tr::kBlockN + 1);
      for (int i = 0; i < in_section; ++i) {
        const double done = free_at.top() + cost;
        free_at.pop();
        free_at.push(done);
        end = std::max(end, done);
      }
    }
  }
  return end;
}

template <typename Element, class Tr>
int choose_section_heads(const FlashFwdParams &p) {
  const int heads_total = p.batch * p.heads_q;
  // Varlen and windows: the model's causal costs do not describe them; one section.
  if (!p.causal || heads_total < 2 || p.cu_seqlens_q || p.mods.window_left >= 0) return std::max(heads_total, 1);
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return heads_total;
  struct Choice {
    int device = -1, heads_total, group, seqlen_q, seqlen_k, section_heads;
  };
  thread_local Choice last;  // one entry: a model or a training loop repeats its shapes
  if (last.device == device && last.heads_total == heads_total && last.group == p.group &&
      last.seqlen_q == p.seqlen_q && last.seqlen_k == p.seqlen_k)
    return last.section_heads;
  int section_heads = heads_total;
  int sms = 0, l2_bytes = 0, per_sm = 0;
  const int64_t kv_bytes = int64_t(heads_total / p.group) * p.seqlen_k * Tr::kHeadDim * 2 * 2;  // K and V
  const int64_t ctas = int64_t(heads_total) * ((p.seqlen_q + Tr::kBlockM - 1) / Tr::kBlockM);
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, flash_fwd_sm80_kernel<Element, Tr, false>, Tr::kThreads,
                                                    Tr::kSmemBytes) != cudaSuccess) {
    (void)cudaGetLastError();  // a failed query only costs the choice, not the launch
    return heads_total;
  }
  // The model costs O(ctas log slots) once per shape; above 2^18 CTAs one section is kept.
  if (kv_bytes > 2 * int64_t(l2_bytes) && ctas <= (int64_t(1) << 18) && per_sm > 0) {
    const int slots = sms * per_sm;
    const int num_m = (p.seqlen_q + Tr::kBlockM - 1) / Tr::kBlockM;
    const double one_section = simulated_makespan<Tr>(p, heads_total, slots);
    std::vector<int> candidates = {1, 2, 4, 8, 16, 32, 64, 128};
    for (int k = 1; k <= 4; ++k) candidates.push_back(k * slots / num_m);  // sections of ~k waves
    std::sort(candidates.begin(), candidates.end());
    for (int s : candidates) {
      if (s < 1 || s >= heads_total) continue;
      if (simulated_makespan<Tr>(p, s, slots) <= 1.005 * one_section) {
        section_heads = s;
        break;
      }
    }
  }
  last = Choice{device, heads_total, p.group, p.seqlen_q, p.seqlen_k, section_heads};
  return section_heads;
}

template <typename Element, class Tr, bool kExt>
cudaError_t launch_kernel(const FlashFwdParams &params, cudaStream_t stream) {
  auto kernel = flash_fwd_sm80_kernel<Element, Tr, kExt>;
  cudaError_t e = set_max_dynamic_smem_once<flash_fwd_sm80_kernel<Element, Tr, kExt>>(Tr::kSmemBytes);
  if (e != cudaSuccess) return e;
  FlashFwdParams p = params;
  if (p.section_heads <= 0) p.section_heads = choose_section_heads<Element, Tr>(p);
  const int64_t ctas = int64_t(p.batch) * p.heads_q * ((p.seqlen_q + Tr::kBlockM - 1) / Tr::kBlockM);
  if (ctas > 0x7fffffff) return cudaErrorInvalidConfiguration;  // one CTA per (batch, head, query block)
  if (ctas == 0) return cudaSuccess;                            // varlen with max_seqlen_q = 0
  kernel<<<unsigned(ctas), Tr::kThreads, Tr::kSmemBytes, stream>>>(p);
  return cudaGetLastError();
}

template <typename Element, class Tr>
cudaError_t launch(const FlashFwdParams &params, cudaStream_t stream) {
  return params.ext.any() ? launch_kernel<Element, Tr, true>(params, stream)
                          : launch_kernel<Element, Tr, false>(params, stream);
}

}  // namespace

// Production tile shapes (docs/perf-history.md has the sweep behind them; an sm80 tile sweep (in git at eb35f39) timed
// alternatives by including this file).
using TraitsD64 = FlashFwdTraits<64, 128, 128, 4, 2, 128, 1, 0>;
using TraitsD128 = FlashFwdTraits<128, 128, 64, 4, 2>;
// d=256 (every multiple of 8 in (128, 256]): 8 warps of 16 rows, so a thread's O accumulator is
// 128 fp32 (32 n8 tiles x 4) beside a 16 x 32 S tile (16 registers); 256 threads are also what a
// 32-chunk row needs for the swizzled copy (8 rows per pass). 32-key K/V tiles keep Q (64 KB) and two
// stages of K and V (64 KB) at 128 KB of shared memory, inside an A100's 163 KB.
using TraitsD256 = FlashFwdTraits<256, 128, 32, 8, 2>;

namespace {

template <class Tr>
const char *kernel_name_of() {
  static const std::string name = "cuda_flash_sm80_d" + std::to_string(Tr::kHeadDim) + "_" +
                                  std::to_string(Tr::kBlockM) + "x" + std::to_string(Tr::kBlockN);
  return name.c_str();
}

}  // namespace

const char *flash_fwd_sm80_kernel_name(int head_dim) {
  if (head_dim <= 64) return kernel_name_of<TraitsD64>();
  return head_dim <= 128 ? kernel_name_of<TraitsD128>() : kernel_name_of<TraitsD256>();
}

cudaError_t launch_flash_fwd_sm80(const FlashFwdParams &p, int head_dim, bool bf16, cudaStream_t stream) {
  if (head_dim <= 64) return bf16 ? launch<__nv_bfloat16, TraitsD64>(p, stream) : launch<__half, TraitsD64>(p, stream);
  if (head_dim <= 128)
    return bf16 ? launch<__nv_bfloat16, TraitsD128>(p, stream) : launch<__half, TraitsD128>(p, stream);
  return bf16 ? launch<__nv_bfloat16, TraitsD256>(p, stream) : launch<__half, TraitsD256>(p, stream);
}

}  // namespace flashbox::cuda
