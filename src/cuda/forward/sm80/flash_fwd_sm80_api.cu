// plan_sm80_forward: the sm80 flash forward family's answer for one problem (src/api/dispatch.cpp
// asks it when the Hopper family is not chosen or declines). Copies the validated Problem into
// FlashFwdParams; the plan launches on the problem's stream. No scratch memory: the only memory
// written is O and LSE.
// src/api validated: fp16/bf16, head_dim a multiple of 8 (served by the d64, d128 or d256 instantiation),
// 16-byte aligned pointers, strides multiples of 8 elements, heads_q a multiple of heads_kv; lse may
// be NULL. The extension's window, softcap, ALiBi, learnable sinks, variable-length batches and mask
// families (attention_chunk, seqused, documents, prefix-LM, block masks whose block sizes are
// multiples of 128) are all taken (run-time fields of FlashFwdParams). What is left to decide here is what only this kernel needs:
// head_dim up to 256, sizes that fit its int fields.
#include <string>

#include "core/backends.hpp"
#include "core/error.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/mask_ext_plan.hpp"
#include "cuda/forward/sm80/flash_fwd_launch.hpp"

namespace flashbox::detail {

PlanResult plan_sm80_forward(const Problem &a) {
  if (a.head_dim_v != a.head_dim)  // src/api runs such calls on column slices of V
    return PlanResult::no("the sm80 forward takes head_dim_v = head_dim only");
  if (a.head_dim > 256 || a.head_dim % 8 != 0)
    return PlanResult::no("the sm80 forward takes head_dim up to 256 in multiples of 8 (got " +
                          std::to_string(a.head_dim) + ")");
  const bool varlen = a.varlen();
  const int64_t grid_q = varlen ? a.max_seqlen_q : a.seqlen_q, grid_k = varlen ? a.max_seqlen_k : a.seqlen_k;
  if (a.seqlen_q > INT32_MAX || a.seqlen_k > INT32_MAX || grid_q > INT32_MAX || grid_k > INT32_MAX ||
      a.batch * a.heads_q > INT32_MAX)
    return PlanResult::no("the sm80 forward needs seqlen_q, seqlen_k and batch * heads_q below 2^31");
  if (const std::string why = cuda::mask_ext_refusal(a, "forward"); !why.empty()) return PlanResult::no(why);
  cuda::FlashFwdParams p{};
  p.q = a.q, p.k = a.k, p.v = a.v, p.o = a.o, p.lse = a.lse;
  p.q_batch = a.q_stride[0], p.q_seq = a.q_stride[1], p.q_head = a.q_stride[2];
  p.k_batch = a.k_stride[0], p.k_seq = a.k_stride[1], p.k_head = a.k_stride[2];
  p.v_batch = a.v_stride[0], p.v_seq = a.v_stride[1], p.v_head = a.v_stride[2];
  p.o_batch = a.o_stride[0], p.o_seq = a.o_stride[1], p.o_head = a.o_stride[2];
  p.batch = int(a.batch), p.seqlen_q = int(grid_q), p.seqlen_k = int(grid_k);
  p.heads_q = int(a.heads_q), p.heads_kv = int(a.heads_kv), p.group = int(a.group);
  p.head_dim = int(a.head_dim);
  p.scale = a.scale;
  p.scale_log2 = a.scale_log2;
  p.causal = a.causal;
  p.mods = cuda::device_mods(a.mods);
  p.transforms = p.mods.capped() || p.mods.alibi();
  p.sinks = a.mods.sinks;
  p.ext = cuda::device_mask_ext(a);
  if (varlen) {
    p.cu_seqlens_q = a.cu_seqlens_q, p.cu_seqlens_k = a.cu_seqlens_k;
    p.total_q = int(a.seqlen_q), p.total_k = int(a.seqlen_k);
  }
  const int d = a.head_dim <= 64 ? 64 : a.head_dim <= 128 ? 128 : 256;  // the instantiation
  const bool bf16 = a.dtype == FLASHBOX_BFLOAT16;
  const cudaStream_t stream = static_cast<cudaStream_t>(a.stream);
  return {Plan{cuda::flash_fwd_sm80_kernel_name(d), 0, [p, d, bf16, stream]() -> int {
                 FLASHBOX_CUDA_TRY(cuda::launch_flash_fwd_sm80(p, d, bf16, stream));
                 return FLASHBOX_OK;
               }}};
}

}  // namespace flashbox::detail
