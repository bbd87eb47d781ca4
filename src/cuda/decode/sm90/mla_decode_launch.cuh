// Launch of the Hopper MLA decode kernel and of its split combine (the decode family's combine at
// D = 512) for one element type; instantiated by the kernel table's file
// (instantiations/mla_decode_sm90_d576_dv512.cu), called by mla_decode_api.cu.
#pragma once
#include <cuda_runtime.h>

#include "cuda/common/launch_attributes.hpp"
#include "cuda/decode/decode_launch.cuh"
#include "cuda/decode/sm90/mla_decode_sm90_kernel.cuh"

namespace flashbox::sm90::mla {

template <class T>
cudaError_t launch_mla_decode(const MlaParams &p, cudaStream_t stream) {
  if (cudaError_t e = cuda::set_max_dynamic_smem_once<mla_decode_sm90_kernel<T>>(Smem::kAlloc); e != cudaSuccess)
    return e;
  const dim3 grid(unsigned(p.row_tiles), unsigned(p.num_splits), unsigned(p.batch));
  mla_decode_sm90_kernel<T><<<grid, kThreads, Smem::kAlloc, stream>>>(p);
  return cudaGetLastError();
}

// The partial results of num_splits > 1 into o and lse (DecodeParams with head_dim 512).
template <class T>
cudaError_t launch_mla_combine(const cuda::DecodeParams &p, cudaStream_t stream) {
  return cuda::decode::launch_combine<T, int(kVDim)>(p, stream);
}

}  // namespace flashbox::sm90::mla
