// Launching one compile-time configuration of the sm90 fp8 forward (flash_fwd_sm90_fp8_kernel.cuh);
// the configurations that exist are the kernel table's (scripts/generate_kernels.py), declared in
// flash_fwd_sm90_fp8_instances.hpp and chosen in flash_fwd_sm90_fp8.cu.
#pragma once
#include <cuda_runtime.h>

#include "cuda/common/launch_attributes.hpp"
#include "cuda/forward/sm90/flash_fwd_sm90_fp8_kernel.cuh"

namespace flashbox::sm90::fp8 {

template <class Cfg>
cudaError_t launch_config(const FwdFp8Params &p, dim3 grid, cudaStream_t stream) {
  cudaError_t e = flashbox::cuda::set_max_dynamic_smem_once<flash_fwd_sm90_fp8_kernel<Cfg>>(Cfg::SMEM_BYTES);
  if (e != cudaSuccess) return e;
  flash_fwd_sm90_fp8_kernel<Cfg><<<grid, Cfg::THREADS, Cfg::SMEM_BYTES, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace flashbox::sm90::fp8
