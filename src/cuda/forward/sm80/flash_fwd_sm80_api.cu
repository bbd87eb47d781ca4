// cuda_flash_forward_sm80: the backend function src/api/dispatch.cpp calls for impl FLASH on sm_80+.
// Turns validated flashbox_attention_args into FlashFwdParams and launches. No scratch memory: the
// only memory written is O and LSE.
// Assumes src/api validated: fp16/bf16, head_dim 64 or 128, 16-byte aligned pointers, strides
// multiples of 8 elements, heads_q a multiple of heads_kv, sizes that fit in int; lse may be NULL.
#include <cmath>
#include <string>

#include "api/backends.hpp"
#include "core/call_state.hpp"
#include "core/error.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/forward/sm80/flash_fwd_launch.hpp"

namespace flashbox::detail {

int cuda_flash_forward_sm80(const flashbox_attention_args &a) {
  if (a.head_dim != 64 && a.head_dim != 128) {
    return fail(FLASHBOX_ERR_UNSUPPORTED_HEAD_DIM,
                "cuda flash (sm80): head_dim " + std::to_string(a.head_dim) + " is not supported (64 or 128)");
  }
  if (a.dtype != FLASHBOX_FLOAT16 && a.dtype != FLASHBOX_BFLOAT16) {
    return fail(FLASHBOX_ERR_UNSUPPORTED_DTYPE, "cuda flash (sm80): dtype must be fp16 or bf16");
  }
  cuda::FlashFwdParams p{};
  p.q = a.q;
  p.k = a.k;
  p.v = a.v;
  p.o = a.o;
  p.lse = a.lse;
  p.q_batch = a.q_stride[0], p.q_seq = a.q_stride[1], p.q_head = a.q_stride[2];
  p.k_batch = a.k_stride[0], p.k_seq = a.k_stride[1], p.k_head = a.k_stride[2];
  p.v_batch = a.v_stride[0], p.v_seq = a.v_stride[1], p.v_head = a.v_stride[2];
  p.o_batch = a.o_stride[0], p.o_seq = a.o_stride[1], p.o_head = a.o_stride[2];
  p.batch = int(a.batch);
  p.seqlen_q = int(a.seqlen_q);
  p.seqlen_k = int(a.seqlen_k);
  p.heads_q = int(a.heads_q);
  p.heads_kv = int(a.heads_kv);
  p.group = int(a.heads_q / a.heads_kv);
  const double scale = a.softmax_scale != 0.f ? double(a.softmax_scale) : 1.0 / std::sqrt(double(a.head_dim));
  p.scale_log2 = float(scale * 1.4426950408889634);
  p.causal = a.causal;
  const char *name = "";
  FLASHBOX_CUDA_TRY(cuda::launch_flash_fwd_sm80(p, int(a.head_dim), a.dtype == FLASHBOX_BFLOAT16,
                                                static_cast<cudaStream_t>(a.stream), &name));
  set_kernel_name(name);
  return FLASHBOX_OK;
}

}  // namespace flashbox::detail
