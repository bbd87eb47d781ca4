// The sm90 fp8 forward's pre-pass (flash_fwd_sm90_fp8_vt.cu): V -> V^T in the key order the kernel's
// P fragments need (flash_fwd_sm90_fp8_kernel.cuh, key_of_position).
#pragma once
#include <cuda_runtime.h>
#include <cstdint>

namespace flashbox::sm90::fp8 {

// V [batch, seqlen_k, heads_kv, head_dim] (e4m3, strides in elements) -> V^T [batch, heads_kv,
// head_dim, keys_pad] (keys_pad a multiple of 64; head_dim a multiple of 16; v 4-byte aligned with
// strides that are multiples of 4).
struct TransposeVArgs {
  const uint8_t *v;
  int64_t v_batch, v_seq, v_head;
  uint8_t *vt;
  int seqlen_k, keys_pad, head_dim, heads_kv, batch_heads;  // batch_heads = batch * heads_kv
};
cudaError_t launch_transpose_v(const TransposeVArgs &a, cudaStream_t stream);

}  // namespace flashbox::sm90::fp8
