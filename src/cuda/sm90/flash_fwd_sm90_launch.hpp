// Launching one compile-time configuration of the sm90 forward kernel. The instantiations are split
// by head_dim (flash_fwd_sm90_d64.cu, flash_fwd_sm90_d128.cu) so that they build in parallel.
#pragma once
#include <cuda_runtime.h>

#include "cuda/sm90/flash_fwd_sm90_kernel.cuh"

namespace flashbox::sm90 {

// Query rows per CTA (64 per consumer warpgroup) and keys per K/V block.
struct TileChoice {
  int bm, bn;
};

cudaError_t launch_fwd_d64(bool bf16, TileChoice tile, const FwdParams &p, dim3 grid, cudaStream_t stream);
cudaError_t launch_fwd_d128(bool bf16, TileChoice tile, const FwdParams &p, dim3 grid, cudaStream_t stream);

template <class Cfg>
cudaError_t launch_config(const FwdParams &p, dim3 grid, cudaStream_t stream) {
  const auto kernel = flash_fwd_sm90_kernel<Cfg>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::SMEM_BYTES);
  if (e != cudaSuccess) return e;
  const int smem = Cfg::O_FITS && p.separate_o ? Cfg::SMEM_BYTES : Cfg::SMEM_BYTES_NO_O;
  kernel<<<grid, Cfg::THREADS, smem, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace flashbox::sm90
