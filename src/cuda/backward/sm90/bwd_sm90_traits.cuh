// Configuration of the Hopper backward (sm_90a): the call's parameters (BwdSm90Params), the variant
// of one instantiation (BwdSm90Traits, the kernel's template parameter), and everything derived from
// it at compile time (BwdConfig: tile shapes, ring depth, register split, shared-memory layout,
// named barrier ids). The kernel's roles: flash_bwd_sm90_kernel.cuh.
//
// Tiles (BN keys per CTA, BM query rows per step, D the instantiation's head_dim):
//   D = 32, 64    BN 128, BM 128   64-col panels (64: 128B swizzle) / one 32-col panel (32: 64B swizzle)
//   D = 96, 128   BN 128, BM 64    96: three 32-column panels, 64B swizzle; 128: two 128B-swizzled panels
//   D = 192, 256  BN 64,  BM 64    SPLIT_D: the consumers split the queries of the scores and the
//                                  columns (256) or the gradients (192, ONE_GRAD) of dK/dV
//   D = 192, DV = 128                BN 64, BM 64: the 192 layout with V, dO, dV 128 wide (DeepSeek's
//                                  prefill): 194 KB of shared memory, three ring stages (a fourth: 234
//                                  KB); BN 128 would need the keys split across consumers again, whose
//                                  dK and dV (64 x 192 + 64 x 128 fp32 each) do not fit 240 registers
// On chip per CTA: K_j and V_j (whole, loaded once), a STAGES-deep ring of Q_i / dO_i, two dS^T
// buffers (SPLIT_D: and two P^T buffers), the dQ staging buffer of one 64 x 64 fp32 chunk per
// consumer (not with SPLIT_D), LSE·log2 e and D per consumer, the mbarriers and the CTA's tile. In
// registers per consumer thread: its dV/dK accumulators (all D columns of its 64 keys, or with SPLIT_D
// its share), S^T and dP^T, their bf16/fp16 A fragments and one dQ chunk.
#pragma once
#include <cuda.h>

#include <cstdint>

#include "cuda/common/score_mods.cuh"
#include "cuda/hopper/tma_host.hpp"

namespace flashbox::sm90::bwd {

struct BwdSm90Params {
  CUtensorMap tm_q, tm_k, tm_v, tm_do;
  TmaOrder ord_q, ord_k, ord_v, ord_do;
  void *dk, *dv;
  int64_t dk_stride[3], dv_stride[3];  // batch, seq, head (elements)
  const float *lse_log2;               // [batch * heads_q, seqlen_q_pad]: LSE · log2 e, +inf on padding and empty rows
  const float *dsum;                   // [batch * heads_q, seqlen_q_pad]: rowsum(dO ∘ O), 0 on padding
  float *dq_accum;                     // [batch * heads_q, num_m_blocks, BM * D], fragment order
  int *dq_sem;                         // deterministic mode: [batch * heads_q, num_m_blocks, NWG], zeroed; else null
  int *dq_done;  // early convert, non-deterministic fixed length: [batch * heads_q, num_m_blocks], zeroed; else null
                 // (each complete at NWG per key block adding into the block: one per chunk)
  int seqlen_q, seqlen_k, seqlen_q_pad, heads_q, heads_kv, group, num_m_blocks;
  int head_dim;                           // the call's (<= D): dK/dV columns past it are not stored
  int num_n_blocks, num_bh, chunk_heads;  // the CTA order (tile_of); num_bh = batch * heads_kv
  cuda::DeviceMods mods;                  // window (causal folded in as window_right = 0), softcap, ALiBi
  int transforms;                         // softcap or ALiBi: the fused P/dS path
  float cap_pre;                          // softcap: scale / cap (t = tanh(s · cap_pre)), else 0
  float unit_log2;  // log2 e times one unit of the transformed score: cap with softcap, else scale
  float scale, scale_log2;
  // Variable-length batches (null cu_q: fixed length; bwd_sm90_tile_order.cuh). The tensors are
  // [total, heads, head_dim] (the maps' batch dimension has size 1); lse_log2 / dsum are [heads_q,
  // seqlen_q_pad = total_q + batch * BM] by packed token, and sequence b's query block m has its dQ
  // accumulator at row q0 + b * BM + m * BM of the same [heads_q, seqlen_q_pad] rows (accum_row: no
  // overlap). tiles / tile_count: the device-built list ({sequence, n_block * heads_kv + kv head},
  // longest first), num_tiles its upper bound (the grid); null tiles (deterministic mode): the
  // fixed-length order over (sequence, kv head) with num_n_blocks from max_k, CTAs past a sequence's
  // keys exit.
  const int32_t *cu_q, *cu_k;
  const int2 *tiles;
  const int *tile_count;
  int total_q, total_k, max_q, max_k, num_tiles;
  int sem_rows;    // accumulator rows per semaphore slot: BM (fixed length: one per query block), 1 (varlen)
  int head_dim_v;  // the call's V / dO / dV columns (<= DV; = head_dim where DV = D): dV's stores stop there
  // The mask families (BwdSm90Traits::masks; fixed length, bf16, no transforms, not deterministic):
  // document ids [batch, seqlen] (doc_*_stride elements per batch entry; null: none), prefix-LM
  // lengths [batch] (null: none), and the pre-pass's tables (flash_bwd_sm90_mask_walks.cu, mask_walk_kernel):
  // per (batch, key block) {first query block, end query block, min key id, max key id} of the CTA's
  // walk, per (batch, query block) {min id, max id} of its rows (documents only, else null).
  const int32_t *doc_q, *doc_k, *prefix;
  int64_t doc_q_stride, doc_k_stride;
  const int4 *key_walk;
  const int2 *q_ids;
  // Block masks (flashbox_block_mask; MASKS, fixed length): the pre-pass's step list of each CTA
  // (flash_bwd_sm90_mask_walks.cu, block_walk_kernel), block_steps[cta * block_slots + i] for i below
  // block_count[cta], cta = (b * heads_kv + hk) * num_n_blocks + n_block, each step encoded as
  // (head in the group) << 25 | query block << 1 | full (bwd_sm90_tile_order.cuh, block_step).
  // Null block_steps: no block mask (the walk is key_walk's range).
  const uint32_t *block_steps;
  const int *block_count;
  int64_t block_slots;
  // A mask mod (DeviceMaskExt::mod_bits; always with a block mask): per step slot of block_steps, the
  // bit tile of a partial step's mask block moved to the step's first row and the CTA's first key
  // (null: the block is not listed partial in kv_*, so it hides every key; the pre-pass writes them,
  // block_walk_kernel), mod_words words a row (kv_block_size / 32). Null mod_steps: no mod.
  const uint32_t *const *mod_steps;
  int mod_words;
};

constexpr int kConsumerWarpgroups = 2;

// What makes one instantiation: a structural type, so that every instantiation spells its variant by
// name, e.g. BwdConfig<__nv_bfloat16, BwdSm90Traits{.head_dim = 128, .block_m = 64, .dq_lag = true}>.
// The generated table of instantiations (scripts/generate_kernels.py, docs/design.md) says which
// ones exist and which calls each serves.
struct BwdSm90Traits {
  int head_dim;  // 32, 64, 96, 128, 192 or 256: the widest head_dim it serves (zeros past the call's)
  // V's, O's, dO's and dV's head dim where it differs from head_dim (0: head_dim): 128 at head_dim 192
  // (DeepSeek's prefill; the pairs are sm90::dv_kernel's, cuda/forward/sm90/tile_policy.hpp). dP^T
  // contracts over it, dV and D = rowsum(dO ∘ O) are that wide; Q, K, dQ, dK stay head_dim.
  int head_dim_v = 0;
  int block_m;  // query rows per step
  // Deterministic only: the ascending add order (key block first_n_block(m) adds first) with the walk
  // over query blocks descending and the group's heads innermost (bwd_sm90_tile_order.cuh). Its own
  // instantiation: two dQ writer warps, and as a run-time branch it slowed the non-deterministic loop.
  bool ascending_order = false;
  // Each consumer issues step i's dQ chunk during step i + 1, the two consumers coupled by one-way
  // handshakes instead of one barrier per step (bwd_sm90_consumer.cuh, "dQ one step late").
  bool dq_lag = false;
  // Softcap calls at head_dim 64: the mask as -inf scores and one select per score in the fused pass.
  // It made softcap 12-14 % faster but the plain path 2-3 % and ALiBi 3-7 % slower in one kernel, so
  // softcap calls get an instantiation of their own.
  bool softcap_select = false;
  // Deterministic only: two dQ writer warps taking alternate steps (bwd_sm90_dq_writer.cuh,
  // bwd_dq_writer_pair). Always on with ascending_order; with the descending order its own
  // instantiation, since the writers' alternating barrier ids cost non-deterministic calls 2-4 %.
  bool two_dq_writers = false;
  // Document ids, prefix-LM lengths, block masks and mask mods (BwdSm90Params' mask fields): the walk
  // over query blocks read from the pre-pass's tables (the keys' documents and the prefix narrow or
  // widen the window's range; a block mask gives a list of (query head, query block, full) steps
  // instead) and the element rule, with a mod's bits, in the blocks it leaves partial
  // (bwd_sm90_consumer.cuh, "Mask families").
  bool masks = false;
};

template <class T, BwdSm90Traits V>
struct BwdConfig {
  using Elem = T;
  static constexpr BwdSm90Traits TRAITS = V;
  static constexpr int D = V.head_dim, BM = V.block_m, NWG = kConsumerWarpgroups;
  static constexpr int DV = V.head_dim_v ? V.head_dim_v : V.head_dim;  // V, dO, dV (below: V_BYTES, DO_BYTES)
  static constexpr bool ASCENDING = V.ascending_order, DQ_LAG = V.dq_lag, CAP_SELECT = V.softcap_select;
  static constexpr bool TWO_WRITERS = V.two_dq_writers, MASKS = V.masks;
  // SPLIT_D (head_dim 192 and 256, bwd_sm90_consumer.cuh): BN = 64 keys, each consumer scores 32
  // queries of them and P^T, dS^T are exchanged in shared memory; else BN = 128, 64 keys each, all
  // queries and all D columns. Who owns which accumulator columns: at 256 consumer w owns COLS = 128
  // columns of dK and dV; at 192 (ONE_GRAD) consumer 0 owns all of dV and consumer 1 all of dK.
  static constexpr bool SPLIT_D = D >= 192;
  static constexpr bool ONE_GRAD = D == 192;
  // ALiBi alone (OVERLAP_ALIBI: d64, d128) and softcap (OVERLAP_CAP: d128) keep the plain path's
  // overlap, P^T under dP^T's product; the other head dims, and softcap at d64 (whose u registers
  // spilled 116 B), compute P and dS in one fused pass after both products.
  static constexpr bool OVERLAP_ALIBI = D == 64 || D == 128, OVERLAP_CAP = D == 128;
  // Q/dO ring depth: 3 at 192, where the rows are 3/4 of 256's and the third stage fits, and at 32,
  // whose steps are about 0.6 of d64's and whose stages are 16 KB (a load gets two steps to land).
  static constexpr int STAGES = ONE_GRAD || D == 32 ? 3 : 2;
  // dS^T into shared memory with one stmatrix per 16-query k-step (1.8-3.9 % faster at d64/d128), or
  // with four st.shared.b32 per k-step: at D = 32 and in the ascending d64 kernel, where ptxas spilled
  // 4-20 B with stmatrix, and with SPLIT_D (P^T stored beside it).
  static constexpr bool DS_STMATRIX = !SPLIT_D && D != 32 && !(ASCENDING && D == 64);
  static constexpr int BN = SPLIT_D ? 64 : 128, COLS = SPLIT_D && !ONE_GRAD ? D / NWG : D;
  static constexpr int THREADS = 128 * (NWG + 1);
  // The consumer warpgroups' register count (setmaxnreg.inc): 240, or 208 at D = 32, where ptxas
  // spilled 4-48 B at 240, 232, 224, 216 and 200 (an allocation artefact: its live state is well
  // below 192) and 0 at 208.
  static constexpr int CONSUMER_REGS = D == 32 ? 208 : 240;
  // Tile rows: 64-column panels of 128-byte rows (128B swizzle), or at D = 96 and 32 32-column panels
  // of 64-byte rows (64B swizzle, layout type 2: a 96- or 32-column row is not a whole number of
  // 128B-swizzle atoms, and Q, dO, K are N-major operands too); KPP k16 steps per panel.
  static constexpr int PCOLS = D % 64 == 0 ? 64 : 32, PANELS = D / PCOLS, ROW = 2 * PCOLS, KPP = PCOLS / 16;
  static constexpr int PANELS_V = DV / PCOLS;  // V's and dO's panels
  static constexpr uint32_t LAYOUT = PCOLS == 64 ? 1 : 2;
  // dQ_i (BM x D) is cut into 64 x 64 chunks: chunk c covers query panel c / ND and head_dim panel
  // c % ND. One chunk per consumer (staged, the dQ writer adds it), or with SPLIT_D the consumer's
  // chunks, added from its registers: two each at 256; at 192 chunk 0 for consumer 0 (which owns dV),
  // chunks 1 and 2 for consumer 1.
  // D = 96: two chunks of 64 columns, the second over K's columns 64..127, of which 96..127 are the
  // TMA's zeros (K is four 32-column panels, KL = 128: the last box wholly past head_dim), in an
  // accumulator of DQ_LD = 128 columns (the d128 layout, so the convert kernels are the d128 ones).
  // D = 32 the same way: one chunk of 64 columns over K's two panels, the second wholly past head_dim
  // (KL = 64), in an accumulator of DQ_LD = 64 columns (the d64 layout and convert kernels).
  static constexpr int NQ = BM / 64, ND = (D + 63) / 64, DQ_LD = 64 * ND, KL = DQ_LD;
  static_assert(ONE_GRAD  ? (NQ == 1 && ND == 3 && NWG == 2)
                : SPLIT_D ? (NQ == 1 && ND == 2 * NWG)
                          : NQ * ND == NWG,
                "dQ chunks per consumer warpgroup");
  // K holds KL columns (D, or 128 at D = 96, 64 at D = 32), Q D, V and dO DV.
  static constexpr int K_BYTES = BN * KL * 2, V_BYTES = BN * DV * 2, Q_BYTES = BM * D * 2, DS_BYTES = BN * BM * 2;
  static constexpr int DO_BYTES = BM * DV * 2;
  static constexpr int QW = SPLIT_D ? BM / NWG : BM;       // queries of S^T, dP^T per consumer
  static constexpr int PT_BYTES = SPLIT_D ? DS_BYTES : 0;  // SPLIT_D: P^T, exchanged like dS^T
  static constexpr int DQ_CHUNK_FLOATS = 64 * 64, DQ_BYTES = SPLIT_D ? 0 : BM * DQ_LD * 4, VEC_BYTES = 2 * BM * 4;
  static constexpr int K_OFF = 0, V_OFF = K_BYTES, Q_OFF = K_BYTES + V_BYTES, DO_OFF = Q_OFF + STAGES * Q_BYTES;
  static constexpr int DS_OFF = DO_OFF + STAGES * DO_BYTES, PT_OFF = DS_OFF + 2 * DS_BYTES;
  static constexpr int DQ_OFF = PT_OFF + 2 * PT_BYTES;
  static constexpr int VEC_OFF = DQ_OFF + DQ_BYTES, BAR_OFF = VEC_OFF + NWG * VEC_BYTES;
  static constexpr int NUM_BARS = 1 + 2 * STAGES;
  // The CTA's tile (TileRef): 9 ints, and with MASKS 4 more (the walk's query blocks, the prefix,
  // the keys' id range: kTileMaskFields).
  static constexpr int TILE_OFF = BAR_OFF + NUM_BARS * 8;
  static constexpr int SMEM_BYTES = TILE_OFF + (MASKS ? 64 : 48) + 1024;  // + slack to align the base to 1024
  static_assert(D == 32 || D == 64 || D == 96 || D == 128 || D == 192 || D == 256,
                "head_dim 32, 64, 96, 128, 192 or 256");
  static_assert(SMEM_BYTES <= 227 * 1024, "shared memory");
  // DV != D: the ONE_GRAD layout only (consumer 0's dV is DV wide, consumer 1's dK D wide; both
  // specialised by role, bwd_sm90_consumer.cuh), DV whole 64-column panels.
  static_assert(DV == D || (ONE_GRAD && DV == 128), "head_dim_v != head_dim: (192, 128) only");
  static_assert(!(ASCENDING && SPLIT_D), "the d192 and d256 configurations have no deterministic mode");
  static_assert(!(DQ_LAG && SPLIT_D), "dq_lag is a schedule of the BN = 128 layout");
  static_assert(!(DQ_LAG && TWO_WRITERS), "the two writers' odd-step dQ barriers (kDqOdd) are dq_lag's dS^T ids");
  static_assert(!ASCENDING || TWO_WRITERS, "the ascending order runs with two dQ writers");
  static_assert(!(TWO_WRITERS && (SPLIT_D || CAP_SELECT)), "two dQ writers: the plain BN = 128 layout");
  static_assert(!MASKS || (D == 128 && DQ_LAG && !ASCENDING && !TWO_WRITERS),
                "the mask families: the d128 dq_lag layout, not deterministic");
};

// Named barriers: 0 is __syncthreads; 1 both consumers (dS^T complete); 2 + w one consumer;
// 4 + w consumer w's dQ chunk staged, 6 + w its staging buffer free (consumer w and the dQ writer).
// With two dQ writers (bwd_dq_writer_pair) those are the even steps'; the odd steps' are kDqOdd (4)
// further, 8 + w and 10 + w (the dq_lag ids below: those kernels never have two writers).
constexpr int kDsBarrier = 1;
constexpr int kChunkBarrier = 2;
constexpr int kDqFull = 4;
constexpr int kDqEmpty = 6;
constexpr int kDqOdd = 4;
constexpr int kDqBarrierThreads = 128 + 32;
// dq_lag (no kDsBarrier): 8 + 2 w + b consumer w's half of dS^T buffer b written (w arrives, the
// partner syncs before its dQ product reads the buffer); 12 + 2 w + b consumer w's dQ product of
// buffer b completed (w arrives, the partner syncs before it overwrites its half of b). 16 in all.
constexpr int kDsFull = 8;
constexpr int kDsEmpty = 12;

}  // namespace flashbox::sm90::bwd
