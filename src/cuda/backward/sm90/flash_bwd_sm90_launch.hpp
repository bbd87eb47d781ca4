// The Hopper backward's launch of one compile-time configuration, declared: the definition
// (flash_bwd_sm90_config_launch.cuh) is compiled only in the kernel table's instantiation files
// (scripts/generate_kernels.py, instantiations/), which build in parallel; flash_bwd_sm90.cu picks
// one (launch_main) through the table's extern declarations (flash_bwd_sm90_instances.hpp). Always
// a programmatic dependent launch after the prepare kernel (the kernel waits for it itself,
// flash_bwd_sm90_kernel.cuh).
#pragma once
#include <cuda_runtime.h>

#include "cuda/backward/sm90/bwd_sm90_traits.cuh"

namespace flashbox::sm90::bwd {

template <class Cfg>
cudaError_t launch_config(const BwdSm90Params &p, dim3 grid, cudaStream_t stream);

}  // namespace flashbox::sm90::bwd
