// Blocked attention: the FlashAttention-2 forward loop (Dao 2023, Algorithm 1) on the CPU.
// One task owns one BLOCK_M-row block of queries of one (batch, head): it loads the Q tile once,
// walks the K/V blocks left to right, computes the BLOCK_M x BLOCK_N score tile, and folds it into
// running per-row state with the online softmax (Milakov & Gimelshein 2018):
//   m_new = max(m, rowmax(S)),  alpha = 2^(m - m_new),  P = 2^(S - m_new),
//   l = l * alpha + rowsum(P),  acc = acc * alpha + P V,
// and divides by l once at the end. S never leaves the tile. Scores are kept in base 2: the softmax
// scale is folded with log2(e) into one multiplier, so every exponential is an exp2; the natural
// log-sum-exp written out is (m + log2 l) * ln 2. Masks (causal, sliding window, prefix;
// src/core/masks.hpp) bound the K/V walk to the keys some row of the block sees, from the first row's
// first visible key to the last row's last one: blocks wholly outside the mask are never visited, and
// only blocks that cross a row's bound are masked element by element. A block mask skips the tiles it
// leaves unlisted (never loaded) and masks none of a tile it lists as wholly full; documents, a
// prefix and partial blocks are masked element by element (core::visible). Softcap and ALiBi are applied to the score tile
// in natural units before it is brought to base 2. Tasks are independent: parallel over
// (batch, head, Q block), like the GPU grid. Inputs of any dtype are converted to fp32 once per tile.
// The per-thread tiles (Q, K^T: O(BLOCK x head_dim); V, acc: O(BLOCK x head_dim_v); S: BLOCK^2;
// independent of the sequence length) are the only scratch memory. Scores use head_dim, the P V
// product and O head_dim_v (head_dim unless the extension set another).
#include "cpu/blocked_attention.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/backends.hpp"
#include "core/call_state.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/softmax_scale.hpp"
#include "cpu/fast_exp2.hpp"
#include "cpu/masked_levels.hpp"
#include "cpu/reference_fp64.hpp"
#include "cpu/scratch_buffer.hpp"
#include "cpu/sink_fold.hpp"

// The tile loops are written to vectorise; on x86-64 build an AVX2/FMA clone next to the baseline
// one and let the loader pick (the library must still run on any x86-64).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"  // inline helpers pass 32-byte vectors; no ABI boundary is crossed
#define FLASHBOX_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v3", "default"), noinline))
#else
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wpsabi"  // the same inline helpers; clang builds no clones
#endif
#define FLASHBOX_VECTOR_CLONES
#endif

namespace flashbox::detail {
namespace {

constexpr float kLn2 = 0.69314718055994530942f;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Tiling {
  const Problem *a;
  const core::ScoreMods *mods;  // mask and score transforms
  int64_t bm, bn, d, dv;        // dv: V's and O's head dim
  int64_t group;                // query heads per kv head
  float scale;                  // softmax_scale
  float scale_log2;             // softmax_scale * log2(e)
  bool transforms;              // softcap or ALiBi: the score tile is transformed element by element
};

// The two tile products run on register blocks of kRows rows x kCols columns: 8 vectors of 8 floats
// of accumulators (AVX2 registers in the x86-64-v3 clone, pairs of SSE registers in the baseline).
// Tiles are padded to whole register blocks and the padding is kept at zero, so the products need
// no edge cases; only the first `rows` x `cols` entries are used.
constexpr int64_t kRows = 4, kCols = 16;
constexpr int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

using vec8 = cpu::exp2_vec8;
inline vec8 load8(const float *p) {
  vec8 v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
inline void store8(float *p, vec8 v) { __builtin_memcpy(p, &v, sizeof v); }

// One thread's on-chip-like working set: Q [BM][DQ], K^T [D][BN], V [BN][DV], S/P [BM][BN],
// acc [BM][DV], m and l [BM] (BM, BN: block_m, block_n; DQ, DV: head_dim and head_dim_v, padded to
// register blocks).
struct Tiles {
  int64_t BM, BN, DQ, DV;
  float *q, *kt, *v, *s, *acc, *m, *l;
  static int64_t floats(int64_t bm, int64_t bn, int64_t d, int64_t dv) {
    const int64_t BM = round_up(bm, kRows), BN = round_up(bn, kCols);
    const int64_t DQ = round_up(d, kCols), DV = round_up(dv, kCols);
    return round_up(BM * DQ + d * BN + BN * DV + BM * BN + BM * DV + 2 * BM, 16);  // 64-byte multiples per thread
  }
  Tiles(float *base, int64_t bm, int64_t bn, int64_t d, int64_t dv)
      : BM(round_up(bm, kRows)),
        BN(round_up(bn, kCols)),
        DQ(round_up(d, kCols)),
        DV(round_up(dv, kCols)),
        q(base),
        kt(q + BM * DQ),
        v(kt + d * BN),
        s(v + BN * DV),
        acc(s + BM * BN),
        m(acc + BM * DV),
        l(m + BM) {}
};

// S[r][c] = scale * sum_x Q[r][x] K^T[x][c] for r < rows4, c < cols16 (multiples of the block).
inline void score_tile(const Tiles &t, int64_t D, int64_t rows4, int64_t cols16, float scale) {
  for (int64_t r0 = 0; r0 < rows4; r0 += kRows)
    for (int64_t c0 = 0; c0 < cols16; c0 += kCols) {
      vec8 acc[kRows][2] = {};
      for (int64_t x = 0; x < D; ++x) {
        const vec8 k0 = load8(t.kt + x * t.BN + c0), k1 = load8(t.kt + x * t.BN + c0 + 8);
        for (int64_t rr = 0; rr < kRows; ++rr) {
          const float qx = t.q[(r0 + rr) * t.DQ + x];
          acc[rr][0] += qx * k0;
          acc[rr][1] += qx * k1;
        }
      }
      for (int64_t rr = 0; rr < kRows; ++rr) {
        store8(t.s + (r0 + rr) * t.BN + c0, acc[rr][0] * scale);
        store8(t.s + (r0 + rr) * t.BN + c0 + 8, acc[rr][1] * scale);
      }
    }
}

// acc[r][x] += sum_{c < cols} P[r][c] V[c][x] for r < rows4, x < DV.
inline void accumulate_pv(const Tiles &t, int64_t rows4, int64_t cols) {
  for (int64_t r0 = 0; r0 < rows4; r0 += kRows)
    for (int64_t x0 = 0; x0 < t.DV; x0 += kCols) {
      vec8 acc[kRows][2];
      for (int64_t rr = 0; rr < kRows; ++rr) {
        acc[rr][0] = load8(t.acc + (r0 + rr) * t.DV + x0);
        acc[rr][1] = load8(t.acc + (r0 + rr) * t.DV + x0 + 8);
      }
      for (int64_t c = 0; c < cols; ++c) {
        const vec8 v0 = load8(t.v + c * t.DV + x0), v1 = load8(t.v + c * t.DV + x0 + 8);
        for (int64_t rr = 0; rr < kRows; ++rr) {
          const float pc = t.s[(r0 + rr) * t.BN + c];
          acc[rr][0] += pc * v0;
          acc[rr][1] += pc * v1;
        }
      }
      for (int64_t rr = 0; rr < kRows; ++rr) {
        store8(t.acc + (r0 + rr) * t.DV + x0, acc[rr][0]);
        store8(t.acc + (r0 + rr) * t.DV + x0 + 8, acc[rr][1]);
      }
    }
}

FLASHBOX_VECTOR_CLONES void process_q_block(const Tiling &p, int64_t b, int64_t h, int64_t qblock, float *tile_mem) {
  const Problem &a = *p.a;
  const int64_t D = p.d, DV = p.dv;
  Tiles t(tile_mem, p.bm, p.bn, p.d, p.dv);
  const int64_t i0 = qblock * p.bm;
  const int64_t rows = std::min(p.bm, a.seqlen_q - i0);
  const int64_t rows4 = round_up(rows, kRows);
  const int64_t hk = h / p.group;

  // >>> report:load_q
  // Q tile to fp32 once; padding rows and columns are zero so they add nothing to the products.
  std::fill_n(t.q, t.BM * t.DQ, 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    cpu::load_row_as_float(a.q, a.dtype, b * a.q_stride[0] + (i0 + r) * a.q_stride[1] + h * a.q_stride[2], D,
                           t.q + r * t.DQ);
  std::fill_n(t.m, t.BM, kNegInf);
  std::fill_n(t.l, t.BM, 0.0f);
  std::fill_n(t.acc, t.BM * t.DV, 0.0f);
  std::fill_n(t.v, t.BN * t.DV, 0.0f);
  // <<< report:load_q

  // The keys some row of the block sees: from the first row's first visible key to the last row's
  // last (both bounds grow with the row). K/V blocks outside are fully masked and skipped.
  const core::ScoreMods &m = *p.mods;
  const int64_t SQ = a.seqlen_q, SK = a.seqlen_k;
  const core::Range keys = core::row_keys(m, b, i0, i0 + rows, SQ, SK);
  const int64_t kv_begin = keys.begin / p.bn * p.bn, kv_end = keys.end;
  // Tiles inside [inner_begin, inner_end) are visible to every row of the block: no element mask.
  const int64_t inner_begin = core::key_begin(m, i0 + rows - 1, SQ, SK), inner_end = core::key_end(m, i0, SQ, SK);
  const float slope = m.slope(b, h);

  // >>> report:kv_loop
  for (int64_t j0 = kv_begin; j0 < kv_end; j0 += p.bn) {
    const int64_t cols = std::min(p.bn, kv_end - j0);
    const int64_t cols16 = round_up(cols, kCols);
    // A block mask decides per tile: unlisted ones are never loaded, wholly full ones need no mask.
    const core::TileMask tile = core::tile_mask(m, b, h, i0, i0 + rows, j0, j0 + cols, SK);
    if (tile == core::TileMask::skip) continue;
    float *row_tmp = t.s;  // S is not live yet: borrow its first row to convert K rows
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t koff = b * a.k_stride[0] + (j0 + c) * a.k_stride[1] + hk * a.k_stride[2];
      cpu::load_row_as_float(a.k, a.dtype, koff, D, row_tmp);
      for (int64_t x = 0; x < D; ++x) t.kt[x * t.BN + c] = row_tmp[x];  // K^T so S rows run along keys
      cpu::load_row_as_float(a.v, a.dtype, b * a.v_stride[0] + (j0 + c) * a.v_stride[1] + hk * a.v_stride[2], DV,
                             t.v + c * t.DV);
    }
    for (int64_t x = 0; x < D; ++x) std::fill(t.kt + x * t.BN + cols, t.kt + x * t.BN + cols16, 0.0f);
    // <<< report:kv_loop

    // >>> report:s_tile
    // S = (Q K^T) * scale * log2(e): scores in base 2, so the softmax below needs only exp2. With
    // softcap or ALiBi the tile is scaled in natural units, transformed, then brought to base 2.
    if (!p.transforms) {
      score_tile(t, D, rows4, cols16, p.scale_log2);
    } else {
      score_tile(t, D, rows4, cols16, p.scale);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
          float &x = t.s[r * t.BN + c];
          x = core::capped_score(x, m.softcap);
          if (m.alibi_slopes) x += core::alibi_bias(slope, i0 + r, j0 + c, SQ, SK);
          x *= flashbox::kLog2e;
        }
    }
    // Only a block that crosses some row's bound needs the element-wise mask: key j0 + c is hidden
    // from row i0 + r outside [key_begin, key_end) of that row.
    if (m.elementwise()) {
      if (tile == core::TileMask::mixed)
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < cols; ++c)
            if (!core::visible(m, b, h, i0 + r, j0 + c, SQ, SK)) t.s[r * t.BN + c] = kNegInf;
    } else if (j0 < inner_begin || j0 + cols > inner_end) {
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t lo = std::clamp<int64_t>(core::key_begin(m, i0 + r, SQ, SK) - j0, 0, cols);
        const int64_t hi = std::clamp<int64_t>(core::key_end(m, i0 + r, SQ, SK) - j0, lo, cols);
        std::fill(t.s + r * t.BN, t.s + r * t.BN + lo, kNegInf);
        std::fill(t.s + r * t.BN + hi, t.s + r * t.BN + cols, kNegInf);
      }
    }
    // <<< report:s_tile

    // >>> report:online_softmax
    // Padding columns get -inf so whole vectors of 8 can be processed: they contribute exp2 = 0.
    for (int64_t r = 0; r < rows; ++r) std::fill(t.s + r * t.BN + cols, t.s + r * t.BN + cols16, kNegInf);
    for (int64_t r = 0; r < rows; ++r) {
      float *s = t.s + r * t.BN;
      vec8 vmax = vec8{} + kNegInf;
      for (int64_t c = 0; c < cols16; c += 8) {
        const vec8 x = load8(s + c);
        vmax = x > vmax ? x : vmax;
      }
      float mx = kNegInf;
      for (int i = 0; i < 8; ++i) mx = std::max(mx, vmax[i]);
      const float m_new = std::max(t.m[r], mx);
      if (m_new == kNegInf) {  // every key so far is masked for this row: nothing to add
        std::fill_n(s, cols16, 0.0f);
        continue;
      }
      const float alpha = cpu::exp2_nonpositive(t.m[r] - m_new);  // 0 on the row's first visible block
      vec8 vsum = {};
      for (int64_t c = 0; c < cols16; c += 8) {
        const vec8 pc = cpu::exp2_nonpositive(load8(s + c) - m_new);
        store8(s + c, pc);
        vsum += pc;
      }
      float rowsum = 0.0f;
      for (int i = 0; i < 8; ++i) rowsum += vsum[i];
      t.l[r] = t.l[r] * alpha + rowsum;
      t.m[r] = m_new;
      float *acc = t.acc + r * t.DV;
      for (int64_t x = 0; x < t.DV; ++x) acc[x] *= alpha;
    }
    // <<< report:online_softmax

    // >>> report:pv
    // acc += P V (padding rows of P hold zero scores from the zero Q rows and are never written out).
    accumulate_pv(t, rows4, cols);
    // <<< report:pv
  }

  // >>> report:finalize
  // O = acc / l (one division per row) and LSE = ln(sum exp(s)) = (m + log2 l) * ln 2. A row that
  // saw no key keeps l = 0: O = 0 and LSE = -inf.
  const float sink2 = m.sink(h) * flashbox::kLog2e;  // a learnable sink joins the denominator (-inf: none)
  for (int64_t r = 0; r < rows; ++r) {
    float *acc = t.acc + r * t.DV;
    float l = t.l[r], mr = t.m[r];
    if (sink2 != kNegInf) cpu::fold_sink(sink2, mr, l, acc, DV, [](float x) { return cpu::exp2_nonpositive(x); });
    const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;
    for (int64_t x = 0; x < DV; ++x) acc[x] *= inv_l;
    cpu::store_row_from_float(a.o, a.dtype, b * a.o_stride[0] + (i0 + r) * a.o_stride[1] + h * a.o_stride[2], DV, acc);
    if (a.lse) a.lse[(b * a.heads_q + h) * a.seqlen_q + i0 + r] = l > 0.0f ? (mr + std::log2(l)) * kLn2 : kNegInf;
  }
  // <<< report:finalize
}

}  // namespace

int cpu_blocked_forward_tiles(const Problem &a, int block_m, int block_n) {
  if (block_m < 1 || block_m > 256 || block_n < 1 || block_n > 256)
    return fail(FLASHBOX_ERR_INVALID_ARGUMENT, "blocked tiles " + std::to_string(block_m) + " x " +
                                                   std::to_string(block_n) + " must be within 1..256");
  const core::ScoreMods &mods = a.mods;
  const Tiling p{&a,           &mods,   block_m, block_n,      a.head_dim,
                 a.head_dim_v, a.group, a.scale, a.scale_log2, mods.softcap > 0.0f || mods.alibi_slopes != nullptr};
  const int64_t q_blocks = (a.seqlen_q + block_m - 1) / block_m;
  const int64_t tasks = a.batch * a.heads_q * q_blocks;
  const int threads = int(std::clamp<int64_t>(omp_get_max_threads(), 1, tasks));
  const int64_t per_thread = Tiles::floats(block_m, block_n, a.head_dim, a.head_dim_v);
  cpu::ScratchBuffer tiles(per_thread * threads);  // allocated on the calling thread, so it is counted

#pragma omp parallel for num_threads(threads) schedule(dynamic)
  for (int64_t task = 0; task < tasks; ++task) {
    // Heaviest first under causal masking (later Q blocks walk more K/V blocks), so the dynamic
    // schedule ends with short tasks.
    const int64_t heads = a.batch * a.heads_q;
    const int64_t qblock = q_blocks - 1 - task / heads;
    const int64_t bh = task % heads;
    process_q_block(p, bh / a.heads_q, bh % a.heads_q, qblock, tiles.data() + omp_get_thread_num() * per_thread);
  }
  set_kernel_name("cpu_blocked_" + std::to_string(block_m) + "x" + std::to_string(block_n));
  return FLASHBOX_OK;
}

int cpu_blocked_forward(const Problem &a) { return cpu_blocked_forward_tiles(a, 64, 64); }

}  // namespace flashbox::detail
