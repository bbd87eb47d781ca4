// The sm90 forward's kernel arguments (FwdParams) and compile-time configuration (FwdConfig: head
// dim, key block, consumer warpgroups, ring stages and the variant flags, with the shared-memory
// layout they imply). The kernel itself, its producer and consumers: flash_fwd_sm90_kernel.cuh; which
// configurations exist: the generated kernel table (scripts/generate_kernels.py) and tile_policy.hpp.
#pragma once
#include <cuda.h>
#include <cstdint>

#include "cuda/common/mask_ext.cuh"
#include "cuda/common/score_mods.cuh"
#include "cuda/hopper/tma_host.hpp"

namespace flashbox::sm90 {

struct FwdParams {
  CUtensorMap tm_q, tm_k, tm_v, tm_o;
  TmaOrder ord_q, ord_k, ord_v, ord_o;
  float *lse;  // [batch, heads_q, seqlen_q] or null
  int seqlen_q, seqlen_k, heads_q, group, num_m_blocks, num_tiles;
  int section_heads;  // (batch, head) pairs per L2 section of the tile order
  int separate_o;     // stage O in its own buffer and release Q early (launch_config: only if it fits)
  float scale, scale_log2;
  cuda::DeviceMods mods;  // window (causal = window_right 0), softcap, ALiBi
  // MODS configurations only. Softcap: s -> tanh(s * cap_pre), cap_pre = scale / cap, a score in
  // units of cap (the softmax then runs with cap * log2 e and the LSE with cap: one multiply per score
  // fewer than going back to raw units); ALiBi's slope is divided by the unit (cap, or the scale
  // without softcap: inv_scale).
  float cap_pre, inv_scale;
  // Variable-length batches (null cu_q: fixed length). The tensors are [total, heads, head_dim] (the
  // maps' batch dimension has size 1), lse [heads_q, total_q]. The tile list (tiles, tile_count) is
  // written on the device before the launch by varlen_tile_list (flash_fwd_sm90_varlen.cu): tile t
  // is {sequence, m_block * heads_q + head}; num_tiles is then an upper bound (the grid's) and
  // tile_count the real count.
  const int32_t *cu_q, *cu_k;
  const int2 *tiles;
  const int *tile_count;
  int total_q, total_k, max_q, max_k;
  // The O tensor for direct stores of a sequence's last partial slice (varlen; elements), and the
  // call's head_dim_v (O's columns): the columns such a store writes (the instantiation's DV may be
  // larger: the columns past head_dim_v are zeros of the TMA's out-of-bounds fill, never stored).
  void *o;
  int64_t o_seq, o_head;
  int head_dim_v;
  const float *sinks;  // learnable sink logits, fp32 [heads_q] (natural units), or null (cuda/common/sink.cuh)
  // The extension's mask families (cuda/common/mask_ext.cuh), read by the EXT configurations only
  // (MaskExtConfig): the tables as the sm80 kernels take them; doc_spans, with document ids, the keys
  // of each query block's documents ([batch, doc_span_blocks] {begin, end}, positions of the
  // sequence, written on the device before the launch: flash_fwd_sm90_doc_spans.cu; doc_span_blocks
  // is num_m_blocks, or for varlen the longest sequence's query blocks); o_batch, O's batch stride in
  // elements for the row-by-row store of a fixed-length slice that seqused_q ends inside (rows past
  // it keep their values). Last in the struct so that the plain configurations' parameter offsets
  // stay as they were.
  cuda::DeviceMaskExt ext;
  const int2 *doc_spans;
  int doc_span_blocks;
  int64_t o_batch;
};

// Shared memory, in order: Q (BM x D), the K ring (STAGES x BN x D) and the V ring (STAGES x BN x DV),
// the barriers, then (1024-aligned, last so that launches without it need not reserve it) the O
// staging buffer (BM x DV); bf16/fp16, plus 1024 bytes of slack to align the base. `d` and `dv` are
// layout columns (whole 64-column panels).
constexpr int num_mbarriers(int stages) { return 2 + 4 * stages; }  // Q, K and V rings
constexpr int fwd_smem_before_o(int bm, int bn, int d, int dv, int stages) {
  return bm * d * 2 + stages * bn * (d + dv) * 2 + num_mbarriers(stages) * 8;
}
constexpr int fwd_o_offset(int bm, int bn, int d, int dv, int stages) {
  return (fwd_smem_before_o(bm, bn, d, dv, stages) + 1023) / 1024 * 1024;
}
// Whether the O staging buffer fits in 227 KB.
constexpr bool o_buffer_fits(int bm, int bn, int d, int dv, int stages) {
  return fwd_o_offset(bm, bn, d, dv, stages) + bm * dv * 2 + 1024 <= 227 * 1024;
}

// What makes one instantiation: a structural type, so that every instantiation spells its variant by
// name, e.g. FwdConfig<__nv_bfloat16, FwdSm90Traits{.head_dim = 64, .block_n = 128, .consumer_warpgroups = 3}>.
// The generated table of instantiations (scripts/generate_kernels.py, docs/design.md) says which ones
// exist and which calls each serves; tile_policy.hpp says which one a call gets.
struct FwdSm90Traits {
  int head_dim;  // D: 64, 96, 128, 192 or 256, the widest head_dim it serves (zeros past the call's)
  // DV, V's and O's head dim where it differs from head_dim (0: head_dim). V's stages, the P.V
  // product's N, the O accumulator (DV / 2 floats per thread) and the epilogue are DV wide; Q, K and
  // S = Q K^T stay D wide. DV < D and whole 64-column panels (the V and O tiles are whole panels, O
  // staged in Q's rows fits there). (192, 128) is DeepSeek's prefill (tile_policy.hpp's kDvKernels).
  int head_dim_v = 0;
  int block_n;                  // BN: keys per K/V stage
  int consumer_warpgroups = 2;  // NWG: 64 query rows each (BM = 64 NWG)
  int stages = 2;               // the K and V rings' depth
  // QREG: each consumer keeps its Q rows in registers (A operand of S = Q K^T from registers) instead
  // of reading them from shared memory at every K block; D/4 more registers per thread
  // (tile_policy.hpp, q_in_registers).
  bool q_in_registers = false;
  // MODS: softcap and ALiBi compiled in (both then runtime switches; the window needs no flag).
  bool mods = false;
  // CAP_FUSED (mods only): an unmasked later block with a softcap and no ALiBi takes the tanh inside the
  // optimistic exponentials' loop (Consumer::softmax; head_dim 128 only, docs/perf-history.md sm90 forward
  // "where the softcap's time goes": 0-3.5 % faster; at head_dim 64 the second softmax path spilled).
  bool softcap_fused = false;
};

// head_dim 96 (the one D that is not a multiple of 64): Q, K and O keep the 128B-swizzled 64-column
// panels, two of them (DL = 128 columns of layout; the TMA zero-fills columns 96..127 and clips
// them on the store, as for any head_dim below its instantiation's), and the products stop at 96:
// S = Q K^T walks D / 16 = 6 k-steps (the K-major k-steps never reach the zero columns). V, the
// N-major operand of O += P V, cannot stop inside a 64-column panel (a 128B-swizzle atom of an
// N-major operand is 64 columns), so it is three 32-column panels of 64-byte rows, 64B swizzle
// (V_COLS = 32): one N = 96 product per k-step over exactly the head_dim.
template <class T, FwdSm90Traits V>
struct FwdConfig {
  using Elem = T;
  static constexpr FwdSm90Traits TRAITS = V;
  static constexpr int D = V.head_dim, DV = V.head_dim_v ? V.head_dim_v : V.head_dim, BN = V.block_n;
  static constexpr int NWG = V.consumer_warpgroups, BM = 64 * NWG, STAGES = V.stages;
  static constexpr bool QREG = V.q_in_registers, MODS = V.mods, CAP_FUSED = V.softcap_fused;
  static_assert(!CAP_FUSED || MODS, "the fused softcap is a MODS configuration's");
  // Variable-length batches: head_dim 64, 96 and 128 (the plan declines them for 192 and 256: see epilogue).
  static constexpr bool VARLEN = D <= 128;
  static constexpr int PANELS = (D + 63) / 64;  // 64-element (128-byte) columns per Q, K, O tile row
  static constexpr int DL = 64 * PANELS;          // the columns of that layout (D, or 128 at D = 96)
  static constexpr int O_PANELS = (DV + 63) / 64;  // the same for V's and O's DV columns
  static constexpr int DVL = 64 * O_PANELS;
  // V's panels: 64 columns of 128-byte rows (128B swizzle), or at D = 96 32 columns of 64-byte rows.
  static constexpr int V_COLS = DV % 64 == 0 ? 64 : 32, V_PANELS = DV / V_COLS, V_ROW_BYTES = 2 * V_COLS;
  static constexpr uint32_t V_LAYOUT = V_COLS == 64 ? 1 : 2;  // descriptor layout type: 128B / 64B swizzle
  static constexpr int THREADS = 128 * (NWG + 1);
  static constexpr int PRODUCER_REGS = NWG == 2 ? 24 : 32;
  static constexpr int CONSUMER_REGS = NWG == 2 ? 240 : 160;
  // A K stage holds BN x DL elements (KV_BYTES, as many as a K load fills), a V stage BN x DVL
  // (V_STAGE_BYTES, the same unless DV != D); a V load fills BN x DV of it (V_BYTES).
  static constexpr int Q_BYTES = BM * DL * 2, KV_BYTES = BN * DL * 2, V_STAGE_BYTES = BN * DVL * 2, V_BYTES = BN * DV * 2;
  static constexpr int Q_OFF = 0, K_OFF = Q_BYTES, V_OFF = K_OFF + STAGES * KV_BYTES;
  static constexpr int NUM_BARS = num_mbarriers(STAGES);
  // The O staging buffer (BM x DV, same panels as Q) exists when it fits beside Q and the rings.
  static constexpr bool O_FITS = o_buffer_fits(BM, BN, DL, DVL, STAGES);
  static constexpr int BAR_OFF = V_OFF + STAGES * V_STAGE_BYTES;
  static constexpr int O_OFF = fwd_o_offset(BM, BN, DL, DVL, STAGES);
  // Launches that stage O in the Q rows (separate_o = 0) reserve only SMEM_BYTES_NO_O: less shared
  // memory taken from the L1 carve-out.
  static constexpr int SMEM_BYTES_NO_O = BAR_OFF + NUM_BARS * 8 + 1024;  // + slack to align the base to 1024
  static constexpr int SMEM_BYTES = O_FITS ? O_OFF + BM * DVL * 2 + 1024 : SMEM_BYTES_NO_O;
  static_assert(D == 64 || D == 96 || D == 128 || D == 192 || D == 256, "head_dim 64, 96, 128, 192 or 256");
  static_assert(DV == D || (DV < D && DV % 64 == 0), "DV: D, or whole 64-column panels below D");
  static_assert(BN % 16 == 0 && BN <= 192, "BN: whole k-steps of P.V, box rows <= 256");
  static_assert(SMEM_BYTES <= 227 * 1024, "shared memory");
  // The extension's mask families (FwdParams::ext): compiled in only by MaskExtConfig below.
  static constexpr bool EXT = false;
};

// A configuration with the extension's mask families compiled in (document ids, prefix-LM,
// attention_chunk, seqused_q/k, block masks; mask_walk.cuh says how the kernel walks them). A traits
// member rather than one more positional flag: the plain configurations keep their type, so their
// kernels carry none of the walk, the element rule or their extra registers (as with the sm80
// forward's kExt). 128 x 128 tiles (BM divides FlexAttention's 128-row mask blocks), fixed length and
// varlen, with the row-by-row store (VARLEN) for slices that seqused_q ends inside.
template <class Base>
struct MaskExtConfig : Base {
  static constexpr bool EXT = true;
  static_assert(Base::BM == 128 && Base::BN == 128, "block masks of 128 x 128 multiples: 128 x 128 tiles");
  static_assert(Base::VARLEN && !Base::MODS, "the row-by-row store; no softcap or ALiBi");
};

}  // namespace flashbox::sm90
