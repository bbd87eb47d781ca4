// flashbox_block_mask (include/flashbox/flashbox.h) at the API edge: its checks, in this order,
//   struct_size; batch 1 or args.batch, heads 1 or args.heads_q; q_block_size, kv_block_size >= 1;
//   max_kv_blocks >= 1 (max_q_blocks >= 1 with q_*); kv_num_blocks / kv_indices set, each other pair
//   both or neither, full_q_* required when q_* and full_kv_* are given and refused without them;
//   table sizes within int64; every table 4-byte aligned and sharing no byte with an output;
//   then on device = cpu the values: counts within [0, min(max, blocks)], indices within
//   [0, blocks), no block twice in a row (partial and full together), q_* the exact transposes
// and its dense form for the levels (core::BlockTable): one kind per (batch, head, q block, kv
// block). The q_* transposes are checked, never needed: the table answers both directions.
#pragma once
#include <cstdint>
#include <vector>

#include "api/overlap.hpp"
#include "core/masks.hpp"
#include "flashbox/flashbox.h"

namespace flashbox::detail {

// Checks e.block_mask (non-null) for a call of `a`'s sizes (fixed length) and, on success, fills
// `kinds` and the view `table` of it. `outputs` are the call's written buffers.
int build_block_table(const flashbox_attention_args &a, const flashbox_block_mask &bm, const ByteView *outputs,
                      const char *const *output_names, int n_outputs, std::vector<uint8_t> &kinds,
                      core::BlockTable &table);

}  // namespace flashbox::detail
