// Launches of the backward's two tensor-core kernels for one head_dim (included once per head_dim by
// flash_bwd_d64.cu / flash_bwd_d128.cu, so the two sizes compile in parallel). Four dK/dV variants
// (dtype x atomic dQ or not) and two dQ variants per head_dim; causal is a run-time flag.
#pragma once
#include "cuda/backward/flash_bwd_dkdv_kernel.cuh"
#include "cuda/backward/flash_bwd_dq_kernel.cuh"

namespace flashbox::cuda::bwd {

template <typename Elem, int D>
cudaError_t launch_flash_bwd_typed(const BwdParams &p, bool deterministic, cudaStream_t stream) {
  using KT = DkDvTile<D>;
  const dim3 grid_kv(unsigned((p.seqlen_k + KT::kBlockK - 1) / KT::kBlockK), unsigned(p.batch * p.heads_kv));
  const size_t smem_kv = KT::smem_bytes(!deterministic);
  auto kernel = deterministic ? flash_bwd_dkdv_kernel<Elem, D, false> : flash_bwd_dkdv_kernel<Elem, D, true>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem_kv));
  if (e != cudaSuccess) return e;
  kernel<<<grid_kv, KT::kThreads, smem_kv, stream>>>(p);
  if ((e = cudaGetLastError()) != cudaSuccess || !deterministic) return e;

  using QT = DqTile<D>;
  const dim3 grid_q(unsigned((p.seqlen_q + QT::kBlockQ - 1) / QT::kBlockQ), unsigned(p.batch * p.heads_q));
  const size_t smem_q = QT::smem_bytes();
  e = cudaFuncSetAttribute(flash_bwd_dq_kernel<Elem, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem_q));
  if (e != cudaSuccess) return e;
  flash_bwd_dq_kernel<Elem, D><<<grid_q, QT::kThreads, smem_q, stream>>>(p);
  return cudaGetLastError();
}

template <int D>
cudaError_t launch_flash_bwd_impl(const BwdParams &p, bool bf16, bool deterministic, cudaStream_t stream) {
  return bf16 ? launch_flash_bwd_typed<__nv_bfloat16, D>(p, deterministic, stream)
              : launch_flash_bwd_typed<__half, D>(p, deterministic, stream);
}

}  // namespace flashbox::cuda::bwd
