// FlashAttention-2 backward, dQ for the deterministic mode (FlashAttention-2 §3.2: dQ_i = Σ_j dS_ij K_j,
// computed here by the owner of Q block i rather than by atomics from every K block, so the sum runs
// in one fixed order). One CTA per (Q block of 64 rows, batch · query head); 4 warps, warp w owns query
// rows [16w, 16w + 16). On chip: the Q and dO tiles (shared, loaded once), K and V tiles of 64 keys
// (shared, double-buffered with cp.async), and per warp the dQ accumulator (registers, fp32, 16 x D).
// Per K block (causal: up to the last block the Q block's last row sees), recomputing:
//   S = Q Kᵀ,  P = exp2(S · scale · log2e − LSE · log2e),  dP = dO Vᵀ,  dS = P ∘ (dP − D),  dQ += dS K
// and dQ · scale is written in the dtype through the caller's strides. Masks, softcap, ALiBi, head
// dims and varlen as in flash_bwd_dkdv_kernel.cuh (K blocks visited: those holding a key of some
// row's window).
// head_dim 256 (multiples of 8 in (128, 256]): as the dK/dV kernel, the accumulated columns are split
// in two halves (grid.z = 2): S and dP over all 256 columns, dQ[:, half] += dS K[:, half] (64 fp32
// registers per thread, as head_dim 128), and K/V tiles of 32 keys so that Q, dO (2·64·264·2 B) and
// two stages of K, V (4·32·264·2 B) fit an A100 (132 KB).
// The extension's mask families as in the dK/dV kernel: the K blocks of the rows' chunk, window and
// prefix visited (every used one with a block mask; with documents those of the rows' ids), P masked
// element by element (block masks: the pair's kind), rows past the used ones written as 0.
#pragma once
#include "cuda/backward/sm80/bwd_device.cuh"
#include "cuda/backward/sm80/flash_bwd_params.hpp"

namespace flashbox::cuda::bwd {

template <int D>
struct DqTile {
  static constexpr bool kSplit = D > 128;  // head_dim 256: column halves, 32-key tiles (see the header)
  static constexpr int kBlockQ = 64, kBlockK = kSplit ? 32 : 64, kWarps = 4, kThreads = kWarps * 32;
  static constexpr int kCols = kSplit ? D / 2 : D;  // dQ columns one CTA accumulates
  static constexpr int kColSplits = D / kCols;      // grid.z
  static constexpr int kLd = D + 8;
  static size_t smem_bytes() { return size_t(2 * kBlockQ * kLd + 4 * kBlockK * kLd) * 2; }
};

template <typename Elem, int D>
__global__ void __launch_bounds__(128) flash_bwd_dq_kernel(const BwdParams p) {
  using T = DqTile<D>;
  using Tr = ElementTraits<Elem>;
  constexpr int kLd = T::kLd, kBQ = T::kBlockQ, kBK = T::kBlockK;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Elem *sQ = reinterpret_cast<Elem *>(smem_raw);
  Elem *sdO = sQ + kBQ * kLd;
  Elem *sK = sdO + kBQ * kLd;     // [2][kBK][kLd]
  Elem *sV = sK + 2 * kBK * kLd;  // [2][kBK][kLd]

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int m0 = blockIdx.x * kBQ;
  const int b = blockIdx.y / p.heads_q, hq = blockIdx.y % p.heads_q, hk = hq / p.group;
  const BwdSeq seq = bwd_seq(p, b);
  int SQ = seq.seqlen_q, SK = seq.seqlen_k;
  const int SQ_rows = SQ;     // the sequence's rows: dQ written (0 past the used ones)
  if (m0 >= SQ_rows) return;  // varlen: past this sequence's queries
  const bool ext_on = p.ext.any();
  if (ext_on) ext_used_lengths(p.ext, b, SQ, SK);
  const int shift = SK - SQ;
  const int chunk_end = p.head_dim / 8;
  constexpr int kCols = T::kCols;
  const int c_off = T::kSplit ? int(blockIdx.z) * kCols : 0;  // first accumulated column

  // Keys seen by some row of the block: [key_begin of the first row, key_end of the last).
  const int last_row = min(m0 + kBQ, SQ) - 1;
  // ext_key_* are mods_key_* with attention_chunk; a prefix widens the range to key 0 and the
  // prefix's end; with a block mask every used key (none when the block holds no used row);
  // documents narrow it below.
  const int prefix = ext_on ? ext_prefix(p.ext, b, SK) : 0;
  int key_begin = ext_key_begin(p.mods, p.ext, m0, shift, SK);
  int key_end = ext_key_end(p.mods, p.ext, last_row, shift, SK);
  if (prefix > 0) key_begin = 0, key_end = max(key_end, prefix);
  if (ext_on && p.ext.blocks()) key_begin = 0, key_end = SK;
  if (ext_on && m0 >= SQ) key_begin = key_end = 0;
  const int32_t *doc_q = nullptr, *doc_k = nullptr;  // this sequence's document ids (null: none)
  if (p.ext.doc_q) {
    doc_q = p.ext.doc_q + (p.cu_seqlens_q ? int64_t(seq.q0) : b * p.ext.doc_q_stride);
    doc_k = p.ext.doc_k + (p.cu_seqlens_q ? int64_t(seq.k0) : b * p.ext.doc_k_stride);
    // Without a block mask (whose full blocks ignore documents): only the keys of the rows'
    // documents (doc_span, as the forward).
    if (!p.ext.blocks() && key_end > key_begin) {
      int first, end;
      doc_span<T::kThreads>(doc_q, m0, min(m0 + kBQ, SQ), doc_k, key_begin, key_end, &first, &end);
      key_begin = max(key_begin, first), key_end = min(key_end, end);
      if (key_end <= key_begin) key_begin = key_end = 0;
    }
  }
  const int n_first = key_begin / kBK;
  const int n_blocks = max(n_first, (key_end + kBK - 1) / kBK);  // one past the last block
  const float slope = p.transforms ? mods_slope(p.mods, b, hq) : 0.0f;

  const Elem *q_head = static_cast<const Elem *>(p.q) + bwd_offset(p.q_stride, seq, seq.q0, hq);
  const Elem *do_head = static_cast<const Elem *>(p.dout) + bwd_offset(p.do_stride, seq, seq.q0, hq);
  const Elem *k_head = static_cast<const Elem *>(p.k) + bwd_offset(p.k_stride, seq, seq.k0, hk);
  const Elem *v_head = static_cast<const Elem *>(p.v) + bwd_offset(p.v_stride, seq, seq.k0, hk);

  // Per thread: LSE (times log2e; +inf where P must be 0) and D of its two rows, g and g + 8.
  const int qw0 = warp * 16;
  float lse2[2], dsum[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int i = m0 + qw0 + g + h * 8;
    const int64_t row = seq.rows_b + hq * seq.rows_h + i;
    const float lse = i < SQ ? p.lse[row] : -INFINITY;
    lse2[h] = lse == -INFINITY ? INFINITY : lse * kLog2e;
    dsum[h] = i < SQ ? p.dsum[row] : 0.0f;
  }

  float dq[kCols / 8][4];
#pragma unroll
  for (int i = 0; i < kCols / 8; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) dq[i][e] = 0.0f;

  if (n_blocks > n_first) {
    load_rows_async<Elem, D, kBQ, T::kThreads>(sQ, q_head, p.q_stride[1], m0, SQ, chunk_end, tid);
    load_rows_async<Elem, D, kBQ, T::kThreads>(sdO, do_head, p.do_stride[1], m0, SQ, chunk_end, tid);
    load_rows_async<Elem, D, kBK, T::kThreads>(sK, k_head, p.k_stride[1], n_first * kBK, SK, chunk_end, tid);
    load_rows_async<Elem, D, kBK, T::kThreads>(sV, v_head, p.v_stride[1], n_first * kBK, SK, chunk_end, tid);
    cp_async_commit();
  }

  for (int nb = n_first; nb < n_blocks; ++nb) {
    const int buf = (nb - n_first) & 1, n0 = nb * kBK;
    if (nb + 1 < n_blocks) {
      load_rows_async<Elem, D, kBK, T::kThreads>(sK + (buf ^ 1) * kBK * kLd, k_head, p.k_stride[1], n0 + kBK, SK,
                                                 chunk_end, tid);
      load_rows_async<Elem, D, kBK, T::kThreads>(sV + (buf ^ 1) * kBK * kLd, v_head, p.v_stride[1], n0 + kBK, SK,
                                                 chunk_end, tid);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    // Block mask: this (Q block, K block) pair's kind, CTA-uniform; a skipped pair has nothing to add.
    const int kind =
        p.ext.blocks() ? block_kind(p.ext, b, hq, m0 / p.ext.q_block, n0 / p.ext.kv_block) : kExtBlockPartial;
    if (kind == kExtBlockSkipped) {
      __syncthreads();
      continue;
    }
    const Elem *cK = sK + buf * kBK * kLd, *cV = sV + buf * kBK * kLd;

    // S = Q Kᵀ and dP = dO Vᵀ (16 queries x 64 keys per warp).
    float s[kBK / 8][4], dp[kBK / 8][4];
    score_products<Elem, D, kBK>(s, dp, sQ, sdO, qw0, cK, cV, kLd, lane);

    // dS = P ∘ (dP − D), P recomputed from the LSE and masked like the forward.
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
#pragma unroll
    for (int nt = 0; nt < kBK / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int h = e >> 1;
        const int i = m0 + qw0 + g + h * 8, key = n0 + nt * 8 + 2 * t + (e & 1);
        float cap_grad = 1.0f;
        float pv = bwd_prob(p, s[nt][e], lse2[h], slope, i, key, shift, &cap_grad);
        if (need_mask) {
          const bool seen = !ext_on ? key < SK && mods_visible(p.mods, i, key, shift)
                            : kind == kExtBlockFull
                                ? key < SK
                                : ext_visible(p.mods, p.ext, doc_q, doc_k, prefix, i, key, shift, SQ, SK) &&
                                      mod_bit_from(p.ext, bits, i - m0, key - n0);
          if (!seen) pv = 0.0f;
        }
        dp[nt][e] = pv * (dp[nt][e] - dsum[h]) * cap_grad;
      }

      // dQ += dS K: A fragments from the dS accumulators, B = K stored [key][dim] (transposed load).
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      const uint32_t a[4] = {Tr::pack(dp[2 * kk][0], dp[2 * kk][1]), Tr::pack(dp[2 * kk][2], dp[2 * kk][3]),
                             Tr::pack(dp[2 * kk + 1][0], dp[2 * kk + 1][1]),
                             Tr::pack(dp[2 * kk + 1][2], dp[2 * kk + 1][3])};
#pragma unroll
      for (int d16 = 0; d16 < kCols / 16; ++d16) {
        uint32_t bk[4];
        ldmatrix_x4_trans(bk, smem_addr(frag_b_kn_addr(cK, kLd, kk * 16, c_off + d16 * 16, lane)));
        mma_m16n16k16<Tr::is_bf16>(dq[2 * d16], dq[2 * d16 + 1], a, bk);
      }
    }
    __syncthreads();  // this K/V buffer is free for the load two blocks ahead
  }

  Elem *dq_head = static_cast<Elem *>(p.dq) + bwd_offset(p.dq_stride, seq, seq.q0, hq);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int i = m0 + qw0 + g + h * 8;
    if (i >= SQ_rows) continue;  // rows in [SQ, SQ_rows) saw nothing: their dQ is 0
    Elem *row = dq_head + int64_t(i) * p.dq_stride[1];
#pragma unroll
    for (int nt = 0; nt < kCols / 8; ++nt) {
      if (c_off + nt * 8 >= p.head_dim) break;  // columns of a smaller head_dim are never stored
      *reinterpret_cast<uint32_t *>(row + c_off + nt * 8 + 2 * t) =
          Tr::pack(dq[nt][2 * h] * p.scale, dq[nt][2 * h + 1] * p.scale);
    }
  }
}

}  // namespace flashbox::cuda::bwd
