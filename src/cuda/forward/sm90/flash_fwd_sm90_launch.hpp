// Launching one compile-time configuration of the sm90 forward kernel. The instantiations are split
// by head_dim (flash_fwd_sm90_d64.cu, flash_fwd_sm90_d128.cu) so that they build in parallel.
#pragma once
#include <cuda_runtime.h>

#include "cuda/forward/sm90/flash_fwd_sm90_kernel.cuh"

namespace flashbox::sm90 {

// Query rows per CTA (64 per consumer warpgroup) and keys per K/V block.
struct TileChoice {
  int bm, bn;
};

// Which configurations keep Q in registers (FwdConfig::QREG): head_dim 128 with 128-key blocks, the
// one where the registers are there (o 64 + s 64 + P 32 + Q 32 of 240 per thread).
constexpr bool q_in_registers(int d, int bn) { return d == 128 && bn == 128; }

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
