// The Hopper backward's host interface (src/cuda/backward/flash_bwd.cu calls it when the device is
// sm_90 and the layout suits the TMA) and the launch of one compile-time configuration. The kernel
// instantiations are split by head_dim (flash_bwd_sm90_d64.cu, _d128.cu) so they build in parallel.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "flashbox/flashbox.h"

namespace flashbox::sm90::bwd {

struct BwdSm90Params;

// What one call needs: the query tile (64 rows for head_dim 128, 128 for 64), the padded row count
// and the scratch sizes (LSE·log2 e and D, [batch · heads_q, seqlen_q_pad] fp32 each; the dQ
// accumulator, [batch · heads_q, seqlen_q_pad, head_dim] fp32 in fragment order).
struct Plan {
  int block_m;
  int64_t seqlen_q_pad, vec_bytes, dq_accum_bytes;
};

// False, with the reason, when this path cannot take the call (not an sm_90 device, a layout the
// TMA cannot describe, deterministic mode, FLASHBOX_BWD_ARCH=sm80, ...): the caller falls back.
bool plan_backward(const flashbox_attention_grad_args &g, Plan *plan, const char **why_not);

// Runs preprocessing, the main kernel and the dQ conversion on the call's stream; the scratch
// buffers have the plan's sizes.
cudaError_t run_backward(const flashbox_attention_grad_args &g, const Plan &plan, float *lse_log2, float *dsum,
                         float *dq_accum);

cudaError_t launch_bwd_d64(bool bf16, const BwdSm90Params &p, dim3 grid, cudaStream_t stream);
cudaError_t launch_bwd_d128(bool bf16, const BwdSm90Params &p, dim3 grid, cudaStream_t stream);

}  // namespace flashbox::sm90::bwd
