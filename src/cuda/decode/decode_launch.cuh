// Launch of one (element type, head_dim) instantiation of the decode kernels; included by the
// instantiation files decode_d64.cu and decode_d128.cu only, so each head dim compiles in parallel.
#pragma once
#include <cuda_runtime.h>

#include "cuda/decode/decode_combine.cuh"
#include "cuda/decode/decode_params.hpp"
#include "cuda/decode/decode_split_kernel.cuh"

namespace flashbox::cuda::decode {

template <typename T, int D>
cudaError_t set_smem_attribute() {
  // Once per instantiation: the ring needs more than the default 48 KB of dynamic shared memory.
  static const cudaError_t once = cudaFuncSetAttribute(
      decode_split_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(SplitTraits<D>::kSmemBytes));
  return once;
}

template <typename T, int D>
cudaError_t launch_split(const DecodeParams &p, cudaStream_t stream) {
  if (cudaError_t e = set_smem_attribute<T, D>(); e != cudaSuccess) return e;
  const dim3 grid(unsigned(p.num_splits), unsigned(p.heads_kv * p.row_tiles), unsigned(p.batch));
  decode_split_kernel<T, D><<<grid, kThreads, SplitTraits<D>::kSmemBytes, stream>>>(p);
  return cudaGetLastError();
}

template <typename T, int D>
cudaError_t launch_combine(const DecodeParams &p, cudaStream_t stream) {
  const int64_t rows = int64_t(p.batch) * p.heads_q * p.seqlen_q;
  const unsigned blocks = unsigned((rows + kCombineWarps - 1) / kCombineWarps);
  decode_combine_kernel<T, D><<<blocks, kCombineWarps * 32, 0, stream>>>(p);
  return cudaGetLastError();
}

template <typename T, int D>
cudaError_t occupancy(int *ctas_per_sm) {
  if (cudaError_t e = set_smem_attribute<T, D>(); e != cudaSuccess) return e;
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(ctas_per_sm, decode_split_kernel<T, D>, kThreads,
                                                       SplitTraits<D>::kSmemBytes);
}

}  // namespace flashbox::cuda::decode

// Defines the three entry points of one head dim (declared in decode_api.cpp).
#define FLASHBOX_DECODE_INSTANTIATE(D)                                                                       \
  namespace flashbox::cuda {                                                                                \
  cudaError_t launch_decode_split_d##D(const DecodeParams &p, bool bf16, cudaStream_t s) {                  \
    return bf16 ? decode::launch_split<__nv_bfloat16, D>(p, s) : decode::launch_split<__half, D>(p, s);     \
  }                                                                                                         \
  cudaError_t launch_decode_combine_d##D(const DecodeParams &p, bool bf16, cudaStream_t s) {                \
    return bf16 ? decode::launch_combine<__nv_bfloat16, D>(p, s) : decode::launch_combine<__half, D>(p, s); \
  }                                                                                                         \
  cudaError_t decode_split_occupancy_d##D(bool bf16, int *ctas) {                                           \
    return bf16 ? decode::occupancy<__nv_bfloat16, D>(ctas) : decode::occupancy<__half, D>(ctas);           \
  }                                                                                                         \
  }
