// What the sm80 flash forward kernel needs from flashbox_attention_args, in the form the kernel reads:
// element strides, int sizes, the softmax scale folded with log2(e). Filled once per call by
// cuda_flash_forward_sm80 (flash_fwd_sm80_api.cu) from arguments that src/api has already validated.
#pragma once
#include <cstdint>

namespace flashbox::cuda {

struct FlashFwdParams {
  const void *q, *k, *v;
  void *o;
  float *lse;                      // [batch, heads_q, seqlen_q] or nullptr
  int64_t q_batch, q_seq, q_head;  // element strides
  int64_t k_batch, k_seq, k_head;
  int64_t v_batch, v_seq, v_head;
  int64_t o_batch, o_seq, o_head;
  int batch, seqlen_q, seqlen_k, heads_q, heads_kv, group;  // group = heads_q / heads_kv
  float scale_log2;                                         // softmax_scale * log2(e)
  int causal;                                               // bottom-right aligned
  int section_heads;  // CTA order: (batch, head) pairs per L2 section; 0 = launch's choice
};

}  // namespace flashbox::cuda
