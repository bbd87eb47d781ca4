// Launches of the backward's two tensor-core kernels for one head_dim (included once per head_dim by
// the kernel table's instantiations/flash_bwd_d64.cu, _d128.cu, _d256.cu, so the sizes compile in
// parallel). dK/dV
// variants per dtype: atomic dQ with 64 Q rows (and 32 for head_dim 64), deterministic with 64, and one
// dQ kernel; head_dim 256 runs 32 Q rows in both modes (shared memory) and grid.z = 2 column halves.
// Causal, windows, softcap, ALiBi, varlen and head dims below D are run-time fields of BwdParams.
#pragma once
#include "cuda/backward/sm80/flash_bwd_dkdv_kernel.cuh"
#include "cuda/backward/sm80/flash_bwd_dq_kernel.cuh"
#include "cuda/common/launch_attributes.hpp"

namespace flashbox::cuda::bwd {

template <typename Elem, int D, int BQ, bool kAtomicDq>
cudaError_t launch_dkdv(const BwdParams &p, cudaStream_t stream) {
  using KT = DkDvTile<D, BQ>;
  // K blocks fastest: the CTAs in flight together share one head's Q, dO and dQ rows in L2 (putting
  // every head's heaviest causal block first instead measured slower on the H200, docs/perf-history.md).
  const dim3 grid(unsigned((p.seqlen_k + KT::kBlockK - 1) / KT::kBlockK), unsigned(p.batch * p.heads_kv),
                  unsigned(KT::kColSplits));
  if (grid.x == 0 || grid.y == 0) return cudaSuccess;  // varlen with max_seqlen_k = 0: no key to write
  const size_t smem = KT::smem_bytes(kAtomicDq);
  auto kernel = flash_bwd_dkdv_kernel<Elem, D, BQ, kAtomicDq>;
  cudaError_t e = set_max_dynamic_smem_once<flash_bwd_dkdv_kernel<Elem, D, BQ, kAtomicDq>>(int(smem));
  if (e != cudaSuccess) return e;
  kernel<<<grid, KT::kThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

template <typename Elem, int D>
cudaError_t launch_flash_bwd_typed(const BwdParams &p, bool deterministic, int block_q, cudaStream_t stream) {
  cudaError_t e;
  constexpr int kBQ = D > 128 ? 32 : 64;  // head_dim 256: full-width Q and dO tiles of 32 rows
  if (!deterministic) {
    // head_dim 128 keeps 64: its dK/dV accumulators alone take 128 registers, so no second CTA fits.
    if constexpr (D == 64)
      if (block_q == 32) return launch_dkdv<Elem, D, 32, true>(p, stream);
    return launch_dkdv<Elem, D, kBQ, true>(p, stream);
  }
  if ((e = launch_dkdv<Elem, D, kBQ, false>(p, stream)) != cudaSuccess) return e;

  using QT = DqTile<D>;
  const dim3 grid_q(unsigned((p.seqlen_q + QT::kBlockQ - 1) / QT::kBlockQ), unsigned(p.batch * p.heads_q),
                    unsigned(QT::kColSplits));
  if (grid_q.x == 0 || grid_q.y == 0) return cudaSuccess;
  const size_t smem_q = QT::smem_bytes();
  e = set_max_dynamic_smem_once<flash_bwd_dq_kernel<Elem, D>>(int(smem_q));
  if (e != cudaSuccess) return e;
  flash_bwd_dq_kernel<Elem, D><<<grid_q, QT::kThreads, smem_q, stream>>>(p);
  return cudaGetLastError();
}

template <int D>
cudaError_t launch_flash_bwd_impl(const BwdParams &p, bool bf16, bool deterministic, int block_q, cudaStream_t stream) {
  return bf16 ? launch_flash_bwd_typed<__nv_bfloat16, D>(p, deterministic, block_q, stream)
              : launch_flash_bwd_typed<__half, D>(p, deterministic, block_q, stream);
}

}  // namespace flashbox::cuda::bwd
