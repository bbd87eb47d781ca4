// The sm90 backward's mask pre-passes (flash_bwd_sm90_mask_walks.cu): the walks a CTA of the
// mask-family configuration takes, written before prepare so that the producer, the consumers and the
// dQ writer of every CTA read the same steps (bwd_sm90_tile_order.cuh: walk_range, block_list,
// block_step). Launched by run() in flash_bwd_sm90.cu, which places their tables in the scratch.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/mask_ext.cuh"
#include "cuda/common/score_mods.cuh"

namespace flashbox::sm90::bwd {

// The mask families' pre-pass (document ids, prefix-LM lengths; the main kernel's MASKS
// configuration). The producer, the consumers and the dQ writer of a CTA must agree on its walk
// before any of them starts (the producer runs ahead), and the document scan needs a whole CTA, so
// one small kernel writes the walks first, launched normally before prepare (so it completed before
// the main kernel starts, which reads the table before its grid dependency wait). One CTA per:
//   (batch entry, key block n): the query blocks the CTA walks, {first, end}: the window's m_range
//     (bwd_sm90_tile_order.cuh), or every block where the key block starts inside the prefix (its
//     keys are seen by every row of their documents), narrowed with documents to the blocks holding
//     a row whose id lies within the key block's id range (cuda::doc_span, the sm80 backward's scan:
//     exact for sorted documents, a superset otherwise); and that id range (the consumers' test for
//     a step that needs no element mask).
//   (batch entry, query block m), documents only: its rows' id range.
// The ids are device memory the host never reads; the scans read only positions below the lengths.
struct MaskWalkArgs {
  const int32_t *doc_q, *doc_k, *prefix;
  int64_t doc_q_stride, doc_k_stride;
  cuda::DeviceMods mods;
  int batch, seqlen_q, seqlen_k, num_n_blocks, num_m_blocks, block_m, block_n;
  int4 *key_walk;  // [batch, num_n_blocks]
  int2 *q_ids;     // [batch, num_m_blocks]; null without documents
};
// One CTA per (batch entry, key block), and with documents per (batch entry, query block).
cudaError_t launch_mask_walk(const MaskWalkArgs &a, cudaStream_t stream);

// Block masks (flashbox_block_mask, fixed length; the main kernel's MASKS configuration): a CTA owns
// (batch entry, kv head, key block of BN = 128) and walks, for each query head of its GQA group, the
// query blocks whose mask rows name its mask key block c = n * BN / kv_block_size, partial blocks
// first, then full ones; a mask query block of q_block_size rows is q_block_size / BM steps of BM =
// 64 rows (the last one clipped to the real rows). Where the lists differ per query head, so do the
// walks. The producer, the consumers and the dQ writer must agree on every step, so one pre-pass
// writes each CTA's steps (bwd_sm90_tile_order.cuh: block_list, block_step) before prepare, like
// the mask walks above:
//   block_walk_kernel: one warp per CTA, the lists of each head of the group read 32 entries at a
//     time, each valid entry expanded into its steps at its place of a warp prefix sum. The lists
//     are the q_* transposes (FlexAttention's BlockMask always carries them) or, without them, the
//     marks below. Counts are clamped to [0, min(max_q_blocks, num_q_blocks)] and indices outside
//     [0, num_q_blocks) skipped (the tables are device memory the host never reads: a malformed table
//     changes values inside the outputs, never an address outside them).
//   block_marks_kernel (no q_*): kv_* inverted into a byte per (mask batch, mask head, key block,
//     query block) and kind (partial, full), zeroed first; a thread per listed entry stores a 1
//     (idempotent, no atomics), so the walk's order is the query blocks ascending whatever the
//     lists' order. Rather than declining calls without q_*: the pass is O(listed entries) plus
//     batch x heads x num_kv_blocks x num_q_blocks bytes (a mask of T = 8192 in 128 x 128 blocks:
//     4 KB per (batch, head)), small beside the backward, and the forward reads kv_* alone too.
// The list's slots per CTA: group x kinds x min(max_q_blocks, num_q_blocks) (num_q_blocks with
// the marks) x q_block_size / BM, the most a (clamped) table can list.
// A mask mod (its bit tiles are per partial entry of a kv_* row, in the row's order: mask_ext.cuh,
// mod_tile): block_marks_kernel also writes each partial entry's index in its kv_* row into the
// entries plane (an int per (mask batch, mask head, key block, query block), -1 where none: filled
// first), also where the walk reads q_*, and block_walk_kernel writes beside each step slot the
// pointer the consumers read a partial step's bits from (BwdSm90Params::mod_steps): the entry's tile
// moved to the step's first row and the CTA's first key, null where kv_* lists no such entry.
struct BlockWalkArgs {
  const int32_t *num[2], *idx[2];  // partial, full: the q_* lists (null: that kind absent or the marks)
  const uint8_t *marks[2];         // no q_*: the marks of each kind (null: that kind absent)
  int64_t mask_batch, mask_heads, max_q_blocks;
  int num_q_blocks, num_kv_blocks, q_steps, kv_div;  // q_steps = q_block_size / BM, kv_div = kv_block_size / BN
  int heads_kv, group, num_n_blocks, num_m_blocks;
  int64_t slots;
  int *count;       // [batch * heads_kv * num_n_blocks]
  uint32_t *steps;  // [batch * heads_kv * num_n_blocks, slots]
  // A mask mod (null mod.mod_bits: none): its tiles' fields of the call's DeviceMaskExt, the entries
  // plane (block_marks_kernel) and the pointers written (as steps).
  cuda::DeviceMaskExt mod;
  const int32_t *entries;
  const uint32_t **mod_steps;
};

struct BlockMarksArgs {
  const int32_t *num[2], *idx[2];            // partial, full: kv_* (null full: none)
  int64_t rows, max_kv_blocks;               // rows: mask_batch * mask_heads * num_q_blocks
  int num_q_blocks, num_kv_blocks, per_row;  // per_row: min(max_kv_blocks, num_kv_blocks), the most a row lists
  uint8_t *marks[2];  // [mask_batch * mask_heads, num_kv_blocks, num_q_blocks], zeroed; null: not built
  int32_t *entries;   // a mask mod's entries plane (the same shape), -1 filled; null: none
};

// The block-mask pre-passes of one call and their scratch, in this order (each a multiple of 16 bytes):
// the CTAs' counts, the step lists, without q_* the marks (two planes of marks_bytes / 2 with full
// blocks), then with a mask mod the step slots' tile pointers and the entries plane. The plan fills
// the arguments' sizes and tables; launch_block_lists places the outputs.
struct BlockLists {
  BlockWalkArgs walk;
  BlockMarksArgs marks;  // num[0] null: no marks pass
  int64_t count_bytes, step_bytes, marks_bytes, mod_step_bytes, entries_bytes;
  int64_t bytes() const { return count_bytes + step_bytes + marks_bytes + mod_step_bytes + entries_bytes; }
};

struct BwdSm90Params;
// Places the tables from `at` (l.bytes() of scratch), zeroes the marks and fills the entries with -1,
// then block_marks_kernel (where it builds the marks or the entries) and block_walk_kernel (one warp
// per CTA of the main grid: ctas of them); points p's block_count, block_steps and mod_steps at them.
cudaError_t launch_block_lists(const BlockLists &l, uint8_t *at, int64_t ctas, cudaStream_t stream, BwdSm90Params &p);

}  // namespace flashbox::sm90::bwd
