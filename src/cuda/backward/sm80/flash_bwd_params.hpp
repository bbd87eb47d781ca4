// What the backward kernels receive: device pointers, element strides, sizes and the scale, filled
// once by plan_sm80_backward (flash_bwd.cu) from the validated problem.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "core/softmax_scale.hpp"
#include "cuda/common/mask_ext.cuh"
#include "cuda/common/score_mods.cuh"

namespace flashbox::cuda::bwd {

struct BwdParams {
  const void *q, *k, *v, *o, *dout;
  void *dq, *dk, *dv;
  const float *lse;  // [batch, heads_q, seqlen_q], natural log, -inf for a row that sees no key
  float *dsum;       // scratch [batch, heads_q, seqlen_q]: D = rowsum(dO * O)
  float *dq_accum;   // scratch [batch, heads_q, seqlen_q, head_dim] fp32, atomic mode only
  int64_t q_stride[3], k_stride[3], v_stride[3], o_stride[3], do_stride[3];
  int64_t dq_stride[3], dk_stride[3], dv_stride[3];
  // Fixed length: the sizes. Varlen: batch = the sequences, seqlen_q/k = max_seqlen_q/k (the grids);
  // lse, dsum and dq_accum are then [heads_q, total_q] (the rowsum and convert kernels run on the
  // flat view batch = 1, seqlen_q = total_q: they need no sequence boundaries).
  int batch, seqlen_q, seqlen_k, heads_q, heads_kv, group;
  int head_dim;      // the call's (multiple of 8, <= the instantiation's: columns past it load as 0)
  int accum_ld;      // row stride of dq_accum: the instantiation's head_dim
  float scale;       // softmax scale
  float scale_log2;  // scale * log2(e): P = exp2(S * scale_log2 - LSE * log2(e))
  int causal;
  DeviceMods mods;  // window (causal folded in as window_right = 0), softcap, ALiBi
  int transforms;   // softcap or ALiBi: P = exp2(x log2e - LSE log2e), x = alibi(cap(scale S))
  const int32_t *cu_seqlens_q, *cu_seqlens_k;  // varlen prefix sums (device); null: fixed length
  int total_q, total_k;                        // varlen: packed token counts
  DeviceMaskExt ext;  // chunk, seqused, documents, prefix-LM, block mask (cuda/common/mask_ext.cuh)
};

// Where one batch entry (or sequence) b of the kernels lives: tensor (b, token i) starts at element
// bb * stride[0] + (t0 + i) * stride[1] (fixed length: bb = b, t0 = 0; varlen: bb = 0, t0 = the
// sequence's first token), and row i of head h of lse / dsum / dq_accum is rows_b + h * rows_h + i.
struct BwdSeq {
  int bb, q0, k0, seqlen_q, seqlen_k;
  int64_t rows_b, rows_h;
};

// One launch function per head_dim (instantiations/flash_bwd_d64.cu, _d128.cu, _d256.cu): preprocessing done, runs the
// dK/dV kernel and, when deterministic, the separate dQ kernel. Returns the launch's cudaError_t.
// block_q: query rows per step of the head_dim-64 atomic-dQ dK/dV kernel (32 or 64; head_dim 128 runs 64, head_dim 256 runs 32).
template <int D>
cudaError_t launch_flash_bwd(const BwdParams &p, bool bf16, bool deterministic, int block_q, cudaStream_t stream);

// flash_bwd_aux.cu: D = rowsum(dO * O) (and nothing else), and dq = scale * dq_accum in the dtype.
cudaError_t launch_bwd_rowsum(const BwdParams &p, bool bf16, int head_dim, cudaStream_t stream);
cudaError_t launch_bwd_convert_dq(const BwdParams &p, bool bf16, int head_dim, cudaStream_t stream);

}  // namespace flashbox::cuda::bwd
