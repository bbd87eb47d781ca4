// FlashAttention-2 backward, main kernel (FlashAttention-2 §3.2, Algorithm 2), sm_80+ tensor cores.
// One CTA per (K/V block of 128 keys, batch · kv head); 8 warps, warp w owns keys [16w, 16w + 16).
// head_dim 256 (every multiple of 8 in (128, 256]) keeps this structure with two changes, so that its
// registers stay those of head_dim 128: (1) the accumulated columns are split in two halves, one per
// CTA (grid.z = 2, column offset c_off = 128 · blockIdx.z): each CTA loads full 256-column rows of
// K, V, Q and dO (Sᵀ = K Qᵀ and dPᵀ = V dOᵀ need the whole dot product) but accumulates only its
// half of dV = Pᵀ dO[:, half], dK = dSᵀ Q[:, half] and dQ[:, half] += dS K[:, half]; Sᵀ and dPᵀ are
// computed twice, about 1.4x the tensor work of a single pass, for 16 x 128 fp32 dK and dV per warp
// (128 registers) instead of 256; (2) 64 keys per CTA (4 warps) and kBlockQ = 32, so that the
// full-width tiles fit an A100: K, V 2·64·264·2 B + Q, dO double-buffered 4·32·264·2 B + dSᵀ
// 64·40·2 B = 137 KB.
// On chip: K and V tiles (shared, loaded once), Q and dO tiles of kBlockQ = 64 or 32 rows (shared,
// double-buffered with cp.async), and per warp dK, dV accumulators (registers, fp32, 16 x D each).
// kBlockQ = 32 halves the Sᵀ/dPᵀ registers so that two CTAs share an SM (one CTA's tensor work
// overlaps the other's exp2, barriers and atomics); 64 does more work per barrier.
// Loop over the query heads of the kv head's group and, per head, over the Q blocks that see this K
// block (causal: from the first such block). Per Q block, with Sᵀ = K Qᵀ computed directly so that
// the keys stay on the rows:
//   Pᵀ = exp2(Sᵀ · scale · log2e − LSE · log2e)   (LSE from the forward; masked keys get 0)
//   dV += Pᵀ dO,  dPᵀ = V dOᵀ,  dSᵀ = Pᵀ ∘ (dPᵀ − D),  dK += dSᵀ Q
// and, when kAtomicDq, dQ += dS K through shared memory (dSᵀ tile) and fp32 atomicAdd into a global
// accumulator (the deterministic mode leaves dQ to flash_bwd_dq_kernel.cuh instead).
// dK is scaled by the softmax scale on the way out.
// Masks and score transforms (cuda/common/score_mods.cuh): the Q blocks visited are those holding a
// query whose window contains a key of the block (mods_query_begin / _end), elements masked only in
// blocks that cross a window edge; softcap and ALiBi are uniform run-time branches of bwd_prob, the
// softcap's derivative multiplies dSᵀ. head_dim below the instantiation's: zero-filled columns,
// stores of head_dim columns only. Varlen: grid (K blocks of max_seqlen_k, sequences x kv heads), a
// CTA past its sequence's keys exits (bwd_seq: the span, clamped).
// The extension's mask families (cuda/common/mask_ext.cuh): the chunk narrows the Q blocks visited
// as the window does, a prefix key's block is seen by every row, with documents or a block mask every
// Q block of the used rows is visited, narrowed with documents (and no block mask) to the rows whose
// ids lie within the key block's (doc_span); P is masked element by element (the element rule, or for a block mask
// the kind of the (Q block, K block) pair, looked up in the Q block's lists: a skipped pair costs
// its loads and no math, a full pair no mask but the end of the keys, a partial pair with a mask mod
// also the bit tile of its entry in the list, p.ext.mod_bits). seqused: keys past the used
// ones are masked, so their dK and dV are written as 0.
#pragma once
#include "cuda/backward/sm80/bwd_device.cuh"
#include "cuda/backward/sm80/flash_bwd_params.hpp"

namespace flashbox::cuda::bwd {

template <int D, int BQ>
struct DkDvTile {
  static constexpr bool kSplit = D > 128;  // head_dim 256: column halves, 64 keys (see the header)
  static constexpr int kWarps = kSplit ? 4 : 8, kBlockK = kWarps * 16, kBlockQ = BQ, kThreads = kWarps * 32;
  static constexpr int kCols = kSplit ? D / 2 : D;  // columns of dK, dV (and dQ) one CTA accumulates
  static constexpr int kColSplits = D / kCols;      // grid.z
  static_assert(!kSplit || BQ == 32, "head_dim 256 runs 32-row Q blocks (shared memory)");
  static constexpr int kLd = D + 8;         // shared row stride (elements) of K, V, Q, dO
  static constexpr int kLdS = kBlockQ + 8;  // shared row stride of the dSᵀ tile
  static size_t smem_bytes(bool atomic_dq) {
    const size_t elems = size_t(2 * kBlockK * kLd + 4 * kBlockQ * kLd + (atomic_dq ? kBlockK * kLdS : 0));
    return elems * 2 + 4 * kBlockQ * sizeof(float);
  }
};

// dQ += v into the fp32 accumulator; two neighbouring columns per instruction on sm_90.
__device__ __forceinline__ void atomic_add_pair(float *dst, float x, float y) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float2 *>(dst), make_float2(x, y));
#else
  atomicAdd(dst, x);
  atomicAdd(dst + 1, y);
#endif
}

template <typename Elem, int D, int BQ, bool kAtomicDq>
__global__ void __launch_bounds__(DkDvTile<D, BQ>::kThreads, (BQ == 32 && D <= 128) ? 2 : 1)
    flash_bwd_dkdv_kernel(const BwdParams p) {
  using T = DkDvTile<D, BQ>;
  using Tr = ElementTraits<Elem>;
  constexpr int kLd = T::kLd, kBQ = T::kBlockQ, kBK = T::kBlockK;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Elem *sK = reinterpret_cast<Elem *>(smem_raw);
  Elem *sV = sK + kBK * kLd;
  Elem *sQ = sV + kBK * kLd;                                                       // [2][kBQ][kLd]
  Elem *sdO = sQ + 2 * kBQ * kLd;                                                  // [2][kBQ][kLd]
  Elem *sdS = sdO + 2 * kBQ * kLd;                                                 // [kBK][kLdS] (atomic dQ only)
  float *sLse = reinterpret_cast<float *>(sdS + (kAtomicDq ? kBK * T::kLdS : 0));  // [2][kBQ], times log2e
  float *sDsum = sLse + 2 * kBQ;                                                   // [2][kBQ]

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int n0 = blockIdx.x * kBK;
  const int b = blockIdx.y / p.heads_kv, hk = blockIdx.y % p.heads_kv;
  const BwdSeq seq = bwd_seq(p, b);
  int SQ = seq.seqlen_q, SK = seq.seqlen_k;
  const int SK_rows = SK;     // the sequence's keys: dK and dV rows written (0 past the used ones)
  if (n0 >= SK_rows) return;  // varlen: past this sequence's keys (the grid covers the longest)
  const bool ext_on = p.ext.any();
  if (ext_on) ext_used_lengths(p.ext, b, SQ, SK);
  const int shift = SK - SQ;  // bottom-right alignment: query i's diagonal is key i + shift
  const int chunk_end = p.head_dim / 8;
  constexpr int kCols = T::kCols;
  const int c_off = T::kSplit ? int(blockIdx.z) * kCols : 0;  // first accumulated column

  // Q blocks that see this K block: those holding a query whose window holds one of its keys.
  // ext_query_* are mods_query_* with attention_chunk. A block holding a prefix key is seen by every
  // row; with a block mask every used row is visited (none when the block holds no used key);
  // documents narrow the rows below.
  const int prefix = ext_on ? ext_prefix(p.ext, b, SK) : 0;
  int q_begin = ext_query_begin(p.mods, p.ext, n0, shift, SQ);
  int q_end = ext_query_end(p.mods, p.ext, min(n0 + kBK, SK) - 1, shift, SQ);
  if (ext_on && (n0 < prefix || p.ext.blocks())) q_begin = 0, q_end = SQ;
  if (ext_on && n0 >= SK) q_begin = q_end = 0;
  const int32_t *doc_q = nullptr, *doc_k = nullptr;  // this sequence's document ids (null: none)
  if (p.ext.doc_q) {
    doc_q = p.ext.doc_q + (p.cu_seqlens_q ? int64_t(seq.q0) : b * p.ext.doc_q_stride);
    doc_k = p.ext.doc_k + (p.cu_seqlens_q ? int64_t(seq.k0) : b * p.ext.doc_k_stride);
    // Without a block mask (whose full blocks ignore documents) only the rows of the block's
    // documents can see its keys: narrow the rows to them (the forward's scan, transposed).
    if (!p.ext.blocks() && q_end > q_begin) {
      int first, end;
      doc_span<T::kThreads>(doc_k, n0, min(n0 + kBK, SK), doc_q, q_begin, q_end, &first, &end);
      q_begin = max(q_begin, first), q_end = min(q_end, end);
      if (q_end <= q_begin) q_begin = q_end = 0;
    }
  }
  const int m_begin = q_begin / kBQ, m_count = max(0, (q_end + kBQ - 1) / kBQ - m_begin);
  const int n_iter = m_count * p.group;

  const Elem *k_head = static_cast<const Elem *>(p.k) + bwd_offset(p.k_stride, seq, seq.k0, hk);
  const Elem *v_head = static_cast<const Elem *>(p.v) + bwd_offset(p.v_stride, seq, seq.k0, hk);

  // Issues the loads of iteration `it` (query head, Q block) into buffer `buf`.
  auto load_q_block = [&](int it, int buf) {
    const int hq = hk * p.group + it / m_count, m0 = (m_begin + it % m_count) * kBQ;
    const Elem *q_head = static_cast<const Elem *>(p.q) + bwd_offset(p.q_stride, seq, seq.q0, hq);
    const Elem *do_head = static_cast<const Elem *>(p.dout) + bwd_offset(p.do_stride, seq, seq.q0, hq);
    load_rows_async<Elem, D, kBQ, T::kThreads>(sQ + buf * kBQ * kLd, q_head, p.q_stride[1], m0, SQ, chunk_end, tid);
    load_rows_async<Elem, D, kBQ, T::kThreads>(sdO + buf * kBQ * kLd, do_head, p.do_stride[1], m0, SQ, chunk_end, tid);
    if (tid < kBQ) {
      const int i = m0 + tid;
      const int64_t row = seq.rows_b + hq * seq.rows_h + i;
      // A row past the end, or one that sees no key (LSE = -inf), gets +inf so that P = exp2(-inf) = 0.
      const float lse = i < SQ ? p.lse[row] : -INFINITY;
      sLse[buf * kBQ + tid] = lse == -INFINITY ? INFINITY : lse * kLog2e;
      sDsum[buf * kBQ + tid] = i < SQ ? p.dsum[row] : 0.0f;
    }
  };

  float dk_acc[kCols / 8][4], dv_acc[kCols / 8][4];
#pragma unroll
  for (int i = 0; i < kCols / 8; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk_acc[i][e] = dv_acc[i][e] = 0.0f;

  if (n_iter > 0) {
    load_rows_async<Elem, D, kBK, T::kThreads>(sK, k_head, p.k_stride[1], n0, SK, chunk_end, tid);
    load_rows_async<Elem, D, kBK, T::kThreads>(sV, v_head, p.v_stride[1], n0, SK, chunk_end, tid);
    load_q_block(0, 0);
    cp_async_commit();
  }

  const int kw0 = warp * 16;  // this warp's first key row within the block
  for (int it = 0; it < n_iter; ++it) {
    const int buf = it & 1;
    if (it + 1 < n_iter) {
      load_q_block(it + 1, buf ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const int hq = hk * p.group + it / m_count, m0 = (m_begin + it % m_count) * kBQ;
    // Block mask: this (Q block, K block) pair's kind, CTA-uniform; a skipped pair has nothing to add.
    const int kind =
        p.ext.blocks() ? block_kind(p.ext, b, hq, m0 / p.ext.q_block, n0 / p.ext.kv_block) : kExtBlockPartial;
    if (kind == kExtBlockSkipped) {
      __syncthreads();
      continue;
    }
    const Elem *cQ = sQ + buf * kBQ * kLd, *cdO = sdO + buf * kBQ * kLd;
    const float *cLse = sLse + buf * kBQ, *cDsum = sDsum + buf * kBQ;

    // Sᵀ (16 keys x 64 queries per warp) = K Qᵀ, and dPᵀ = V dOᵀ.
    float s[kBQ / 8][4], dp[kBQ / 8][4];
    score_products<Elem, D, kBQ>(s, dp, sK, sV, kw0, cQ, cdO, kLd, lane);

    // Pᵀ from the LSE, masked where a key is past the end or outside the query's window (only in a
    // block that is not inside every row's window).
    const bool need_mask = ext_on ? kind != kExtBlockFull || n0 + kBK > SK
                                  : !(mods_key_begin(p.mods, m0 + kBQ - 1, shift, SK) <= n0 &&
                                      mods_key_end(p.mods, m0, shift, SK) >= n0 + kBK);
    // A partial pair's mod bits, moved to (m0, n0). Its entry in the row is looked up again here
    // rather than kept from the lookup above: nothing more lives across the products (ptxas spilled
    // more in the d64 dK/dV kernel when it did).
    static_assert(kBK % 32 == 0, "a mod's bit tile moves by whole 32-key words");
    const uint32_t *bits = nullptr;
    if (kind == kExtBlockPartial && p.ext.mod_bits) {
      const int qb = m0 / p.ext.q_block, kb = n0 / p.ext.kv_block;
      int entry = -1;
      block_kind(p.ext, b, hq, qb, kb, &entry);
      bits = mod_tile(p.ext, b, hq, qb, entry, m0 - qb * p.ext.q_block, n0 - kb * p.ext.kv_block);
    }
    const float slope = p.transforms ? mods_slope(p.mods, b, hq) : 0.0f;
#pragma unroll
    for (int nt = 0; nt < kBQ / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = n0 + kw0 + g + (e >= 2 ? 8 : 0), qcol = nt * 8 + 2 * t + (e & 1);
        float cap_grad = 1.0f;
        float pv = bwd_prob(p, s[nt][e], cLse[qcol], slope, m0 + qcol, key, shift, &cap_grad);
        if (need_mask) {
          const bool seen = !ext_on ? key < SK && mods_visible(p.mods, m0 + qcol, key, shift)
                            : kind == kExtBlockFull
                                ? key < SK
                                : ext_visible(p.mods, p.ext, doc_q, doc_k, prefix, m0 + qcol, key, shift, SQ, SK) &&
                                      mod_bit_from(p.ext, bits, qcol, key - n0);
          if (!seen) pv = 0.0f;
        }
        s[nt][e] = pv;
        dp[nt][e] = pv * (dp[nt][e] - cDsum[qcol]) * cap_grad;  // dSᵀ
      }

      // dV += Pᵀ dO and dK += dSᵀ Q: A fragments straight from the accumulators, B from the tiles.
#pragma unroll
    for (int kq = 0; kq < kBQ / 16; ++kq) {
      const uint32_t ap[4] = {Tr::pack(s[2 * kq][0], s[2 * kq][1]), Tr::pack(s[2 * kq][2], s[2 * kq][3]),
                              Tr::pack(s[2 * kq + 1][0], s[2 * kq + 1][1]),
                              Tr::pack(s[2 * kq + 1][2], s[2 * kq + 1][3])};
      const uint32_t ads[4] = {Tr::pack(dp[2 * kq][0], dp[2 * kq][1]), Tr::pack(dp[2 * kq][2], dp[2 * kq][3]),
                               Tr::pack(dp[2 * kq + 1][0], dp[2 * kq + 1][1]),
                               Tr::pack(dp[2 * kq + 1][2], dp[2 * kq + 1][3])};
      if constexpr (kAtomicDq) {
        Elem *row_lo = sdS + (kw0 + g) * T::kLdS + kq * 16 + 2 * t;
        Elem *row_hi = row_lo + 8 * T::kLdS;
        *reinterpret_cast<uint32_t *>(row_lo) = ads[0];
        *reinterpret_cast<uint32_t *>(row_hi) = ads[1];
        *reinterpret_cast<uint32_t *>(row_lo + 8) = ads[2];
        *reinterpret_cast<uint32_t *>(row_hi + 8) = ads[3];
      }
#pragma unroll
      for (int dp16 = 0; dp16 < kCols / 16; ++dp16) {
        uint32_t bdo[4], bq[4];
        ldmatrix_x4_trans(bdo, smem_addr(frag_b_kn_addr(cdO, kLd, kq * 16, c_off + dp16 * 16, lane)));
        ldmatrix_x4_trans(bq, smem_addr(frag_b_kn_addr(cQ, kLd, kq * 16, c_off + dp16 * 16, lane)));
        mma_m16n16k16<Tr::is_bf16>(dv_acc[2 * dp16], dv_acc[2 * dp16 + 1], ap, bdo);
        mma_m16n16k16<Tr::is_bf16>(dk_acc[2 * dp16], dk_acc[2 * dp16 + 1], ads, bq);
      }
    }

    if constexpr (kAtomicDq) {
      __syncthreads();  // the whole dSᵀ tile is in shared memory
      // dQ (kBQ queries x this CTA's kCols columns) = dS K: warps split the queries in groups of 16
      // and the columns in the rest (8 warps, 64 rows: 4 groups x 2 halves; 32 rows: 2 groups x 4
      // quarters; head_dim 256, 4 warps, 32 rows: 2 groups x 2 halves of the CTA's 128 columns).
      constexpr int kRowGroups = kBQ / 16, kQCols = kCols / (T::kWarps / kRowGroups);
      const int qw0 = (warp % kRowGroups) * 16, c0 = c_off + (warp / kRowGroups) * kQCols;
      float dq[kQCols / 8][4];
#pragma unroll
      for (int i = 0; i < kQCols / 8; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) dq[i][e] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < kBK / 16; ++kk) {
        uint32_t a[4];
        ldmatrix_x4_trans(a, smem_addr(frag_a_trans_addr(sdS, T::kLdS, qw0, kk * 16, lane)));
#pragma unroll
        for (int dp16 = 0; dp16 < kQCols / 16; ++dp16) {
          uint32_t bk[4];
          ldmatrix_x4_trans(bk, smem_addr(frag_b_kn_addr(sK, kLd, kk * 16, c0 + dp16 * 16, lane)));
          mma_m16n16k16<Tr::is_bf16>(dq[2 * dp16], dq[2 * dp16 + 1], a, bk);
        }
      }
      float *acc = p.dq_accum + (seq.rows_b + hq * seq.rows_h + m0) * D;  // accum_ld = D
#pragma unroll
      for (int nt = 0; nt < kQCols / 8; ++nt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = qw0 + g + h * 8;
          if (m0 + r < SQ && c0 + nt * 8 < p.head_dim)
            atomic_add_pair(acc + int64_t(r) * D + c0 + nt * 8 + 2 * t, dq[nt][2 * h], dq[nt][2 * h + 1]);
        }
    }
    __syncthreads();  // buffers of this iteration (Q, dO, dSᵀ) are free for the next loads
  }

  // dK = scale · Σ dSᵀ Q, dV = Σ Pᵀ dO, for the keys of this block that exist.
  Elem *dk_head = static_cast<Elem *>(p.dk) + bwd_offset(p.dk_stride, seq, seq.k0, hk);
  Elem *dv_head = static_cast<Elem *>(p.dv) + bwd_offset(p.dv_stride, seq, seq.k0, hk);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int key = n0 + kw0 + g + half * 8;
    if (key >= SK_rows) continue;  // keys in [SK, SK_rows) were masked: their rows are 0
    Elem *dk_row = dk_head + int64_t(key) * p.dk_stride[1];
    Elem *dv_row = dv_head + int64_t(key) * p.dv_stride[1];
#pragma unroll
    for (int nt = 0; nt < kCols / 8; ++nt) {
      if (c_off + nt * 8 >= p.head_dim) break;  // columns of a smaller head_dim are never stored
      const int c = c_off + nt * 8 + 2 * t;
      *reinterpret_cast<uint32_t *>(dk_row + c) =
          Tr::pack(dk_acc[nt][2 * half] * p.scale, dk_acc[nt][2 * half + 1] * p.scale);
      *reinterpret_cast<uint32_t *>(dv_row + c) = Tr::pack(dv_acc[nt][2 * half], dv_acc[nt][2 * half + 1]);
    }
  }
}

}  // namespace flashbox::cuda::bwd
