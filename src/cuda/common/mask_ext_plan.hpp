// The host side of cuda/common/mask_ext.cuh: a validated Problem's mask families in the form the
// kernels read (the sm80 family, the sm90 mask-family kernels), and what the kernels cannot take
// (block sizes that are not multiples of their tiles), said once for the forward and the backward
// plans.
#pragma once
#include <string>

#include "core/problem.hpp"
#include "cuda/common/mask_ext.cuh"

namespace flashbox::cuda {

// The block-mask tile every sm80 kernel fits: 128 rows and keys (the forward's query block, the
// backward's key block; the other tiles divide it). FlexAttention's default BlockMask is 128 x 128.
inline constexpr int kMaskTile = 128;

inline DeviceMaskExt device_mask_ext(const detail::Problem &a) {
  DeviceMaskExt x;
  x.chunk = int(a.mods.chunk);
  x.doc_q = a.mods.doc_q, x.doc_k = a.mods.doc_k;
  x.doc_q_stride = a.mods.doc_q_stride, x.doc_k_stride = a.mods.doc_k_stride;
  x.prefix = a.mods.prefix;
  x.seqused_q = a.seqused_q, x.seqused_k = a.seqused_k;
  const flashbox_block_mask &bm = a.block_mask;
  if (bm.kv_num_blocks) {
    x.kv_num = bm.kv_num_blocks, x.kv_idx = bm.kv_indices;
    x.full_num = bm.full_kv_num_blocks, x.full_idx = bm.full_kv_indices;
    x.bm_batch = int(bm.batch), x.bm_heads = int(bm.heads);
    x.q_block = int(bm.q_block_size), x.kv_block = int(bm.kv_block_size);
    x.max_kv = int(bm.max_kv_blocks);
    x.num_q_blocks = int((a.seqlen_q + bm.q_block_size - 1) / bm.q_block_size);
    x.num_kv_blocks = int((a.seqlen_k + bm.kv_block_size - 1) / bm.kv_block_size);
    x.mod_bits = a.mod_bits, x.mod_tile_base = a.mod_tile_base;
    x.mod_batch = int(a.mod_batch), x.mod_heads = int(a.mod_heads);
  }
  return x;
}

// Why the sm80 `pass` cannot take the problem's mask families; "" when it can.
inline std::string mask_ext_refusal(const detail::Problem &a, const char *pass) {
  if (a.mods.chunk > INT32_MAX) return std::string("the sm80 ") + pass + " takes attention_chunk below 2^31";
  const flashbox_block_mask &bm = a.block_mask;
  if (!bm.kv_num_blocks) return "";
  if (bm.q_block_size % kMaskTile != 0 || bm.kv_block_size % kMaskTile != 0)
    return std::string("the sm80 ") + pass +
           " takes block masks whose q_block_size and kv_block_size are multiples of " + std::to_string(kMaskTile) +
           " (got " + std::to_string(bm.q_block_size) + " x " + std::to_string(bm.kv_block_size) + ")";
  if (bm.q_block_size > INT32_MAX || bm.kv_block_size > INT32_MAX || bm.max_kv_blocks > INT32_MAX)
    return std::string("the sm80 ") + pass + " takes block-mask sizes below 2^31";
  return "";
}

}  // namespace flashbox::cuda
