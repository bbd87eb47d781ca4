// Launching one compile-time configuration of the sm90 fp8 forward (flash_fwd_sm90_fp8_kernel.cuh);
// the configurations that exist are the kernel table's (scripts/generate_kernels.py), declared in
// flash_fwd_sm90_fp8_instances.hpp and chosen in flash_fwd_sm90_fp8.cu.
#pragma once
#include <cuda_runtime.h>

#include "cuda/common/launch_attributes.hpp"
#include "cuda/forward/sm90/flash_fwd_sm90_fp8_kernel.cuh"

namespace flashbox::sm90::fp8 {

// Launched right after the V^T pre-pass (flash_fwd_sm90_fp8.cu) as its programmatic dependent
// (launch_attributes.hpp): the CTAs may start while the pre-pass's last blocks run, set up their
// barriers and load Q and the first K blocks, and the producer waits for the pre-pass only before its
// first V^T load (flash_fwd_sm90_fp8_kernel.cuh, producer).
template <class Cfg>
cudaError_t launch_config(const FwdFp8Params &p, dim3 grid, cudaStream_t stream) {
  cudaError_t e = flashbox::cuda::set_max_dynamic_smem_once<flash_fwd_sm90_fp8_kernel<Cfg>>(Cfg::SMEM_BYTES);
  if (e != cudaSuccess) return e;
  return flashbox::cuda::launch_kernel(flash_fwd_sm90_fp8_kernel<Cfg>, grid, dim3(Cfg::THREADS), Cfg::SMEM_BYTES,
                                       stream, true, p);
}

}  // namespace flashbox::sm90::fp8
