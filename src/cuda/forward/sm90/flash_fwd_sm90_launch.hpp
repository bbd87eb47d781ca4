// Launching one compile-time configuration of the sm90 forward kernel. The instantiations are split
// by head_dim (flash_fwd_sm90_d64.cu, _d96.cu, _d128.cu, _d192.cu, _d256.cu, and _d192_dv128_128x128.cu
// for head_dim_v 128) so that they build in parallel.
#pragma once
#include <cuda_runtime.h>

#include "cuda/common/launch_attributes.hpp"
#include "cuda/forward/sm90/flash_fwd_sm90_kernel.cuh"
#include "cuda/forward/sm90/tile_policy.hpp"

namespace flashbox::sm90 {

// mods: the configuration with softcap and ALiBi compiled in (the default tile only: tile_policy.hpp).
cudaError_t launch_fwd_d64(bool bf16, TileChoice tile, bool mods, const FwdParams &p, dim3 grid, cudaStream_t stream);
cudaError_t launch_fwd_d96(bool bf16, const FwdParams &p, dim3 grid, cudaStream_t stream);
cudaError_t launch_fwd_d128(bool bf16, TileChoice tile, bool mods, const FwdParams &p, dim3 grid, cudaStream_t stream);
cudaError_t launch_fwd_d192(bool bf16, const FwdParams &p, dim3 grid, cudaStream_t stream);
cudaError_t launch_fwd_d256(bool bf16, const FwdParams &p, dim3 grid, cudaStream_t stream);
// A (D, DV) pair of tile_policy.hpp's kDvKernels; cudaErrorInvalidValue for any other pair.
cudaError_t launch_fwd_dv(bool bf16, int d, int dv, const FwdParams &p, dim3 grid, cudaStream_t stream);

// A variable-length batch's tile list (flash_fwd_sm90_varlen.cu): tiles {sequence, m_block * heads_q
// + head} of bm-row query blocks ordered by work (bn-key blocks visited), longest first, head by head
// inside a work level; tile_count of them; room for max_entries blocks times heads_q.
struct VarlenListArgs {
  const int32_t *cu_q, *cu_k;
  int batch, total_q, total_k, max_q, max_k;
  int bm, bn, heads_q, max_entries;
  cuda::DeviceMods mods;
  int2 *entries;
  int *tile_count;
};
cudaError_t launch_varlen_tile_list(const VarlenListArgs &a, cudaStream_t stream);

// The doc spans of the mask-family kernels (flash_fwd_sm90_doc_spans.cu): for every (batch entry or
// sequence, query block of bm rows), the keys of the rows' documents, into spans [batch * num_m_blocks].
// Varlen (cu_q non-null): the sequences of the prefix sums, num_m_blocks those of the longest.
struct DocSpanArgs {
  cuda::DeviceMaskExt ext;
  int batch, seqlen_q, seqlen_k, bm, num_m_blocks;
  const int32_t *cu_q, *cu_k;
  int total_q, total_k, max_q, max_k;
  int2 *spans;
};
cudaError_t launch_doc_spans(const DocSpanArgs &a, cudaStream_t stream);
// The mask-family configurations (MaskExtConfig): head_dim 64 and 128 (72..128), 128 x 128, bf16,
// fixed length and varlen (the generated kernel table's rows d64 128x128_masks and d128 128x128_masks).
cudaError_t launch_fwd_masks(int d, const FwdParams &p, dim3 grid, cudaStream_t stream);

template <class Cfg>
cudaError_t launch_config(const FwdParams &p, dim3 grid, cudaStream_t stream) {
  const auto kernel = flash_fwd_sm90_kernel<Cfg>;
  cudaError_t e = flashbox::cuda::set_max_dynamic_smem_once<flash_fwd_sm90_kernel<Cfg>>(Cfg::SMEM_BYTES);
  if (e != cudaSuccess) return e;
  const int smem = Cfg::O_FITS && p.separate_o ? Cfg::SMEM_BYTES : Cfg::SMEM_BYTES_NO_O;
  kernel<<<grid, Cfg::THREADS, smem, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace flashbox::sm90
