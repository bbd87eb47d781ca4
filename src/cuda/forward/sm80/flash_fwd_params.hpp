// What the sm80 flash forward kernel needs from the validated Problem, in the form the kernel reads:
// element strides, int sizes, the softmax scale folded with log2(e), the mask and score transforms
// (cuda/common/score_mods.cuh) and, for variable-length batches, the prefix sums. Filled once per
// call by plan_sm80_forward (flash_fwd_sm80_api.cu) from arguments that src/api has already validated.
#pragma once
#include <cstdint>

#include "cuda/common/mask_ext.cuh"
#include "cuda/common/score_mods.cuh"

namespace flashbox::cuda {

struct FlashFwdParams {
  const void *q, *k, *v;
  void *o;
  float *lse;                      // [batch, heads_q, seqlen_q] ([heads_q, total_q] varlen) or nullptr
  int64_t q_batch, q_seq, q_head;  // element strides (batch strides unused when varlen)
  int64_t k_batch, k_seq, k_head;
  int64_t v_batch, v_seq, v_head;
  int64_t o_batch, o_seq, o_head;
  // Fixed length: the sizes. Varlen: batch = the sequences, seqlen_q/k = max_seqlen_q/k (the grid).
  int batch, seqlen_q, seqlen_k, heads_q, heads_kv, group;  // group = heads_q / heads_kv
  int head_dim;        // the call's (multiple of 8, <= the instantiation's: columns past it load as 0)
  float scale;         // softmax scale (natural units)
  float scale_log2;    // softmax_scale * log2(e)
  int causal;          // bottom-right aligned; also folded into mods (window_right = 0)
  DeviceMods mods;     // window (causal included), softcap, ALiBi
  int transforms;      // softcap or ALiBi: scores become natural units x and p = exp2(x log2e - m)
  const float *sinks;  // learnable sink logits, fp32 [heads_q] (natural units), or null (cuda/common/sink.cuh)
  const int32_t *cu_seqlens_q, *cu_seqlens_k;  // varlen prefix sums (device), null: fixed length
  int total_q, total_k;                        // varlen: packed token counts (clamp every offset)
  DeviceMaskExt ext;  // chunk, seqused, documents, prefix-LM, block mask (cuda/common/mask_ext.cuh)
  int section_heads;                           // CTA order: (batch, head) pairs per L2 section; 0 = launch's choice
};

}  // namespace flashbox::cuda
