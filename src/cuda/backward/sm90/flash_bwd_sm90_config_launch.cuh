// Launch of one compile-time configuration of the Hopper backward kernel: the definition of
// launch_config (flash_bwd_sm90_launch.hpp), included by the kernel table's instantiation files only.
#pragma once
#include <cuda_runtime.h>

#include "cuda/backward/sm90/flash_bwd_sm90_kernel.cuh"
#include "cuda/backward/sm90/flash_bwd_sm90_launch.hpp"
#include "cuda/common/launch_attributes.hpp"

namespace flashbox::sm90::bwd {

// Launched programmatically after the prepare kernel (flash_bwd_sm90.cu, run): the kernel's prologue
// overlaps prepare's tail (flash_bwd_sm90_kernel.cuh, "Programmatic dependent launch").
template <class Cfg>
cudaError_t launch_config(const BwdSm90Params &p, dim3 grid, cudaStream_t stream) {
  const cudaError_t e = flashbox::cuda::set_max_dynamic_smem_once<flash_bwd_sm90_kernel<Cfg>>(Cfg::SMEM_BYTES);
  if (e != cudaSuccess) return e;
  return flashbox::cuda::launch_kernel(flash_bwd_sm90_kernel<Cfg>, grid, dim3(Cfg::THREADS), Cfg::SMEM_BYTES, stream,
                                       true, p);
}

}  // namespace flashbox::sm90::bwd
