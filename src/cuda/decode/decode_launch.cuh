// Launch of one (element type, head_dim, ring depth, cache element type) instantiation of the decode
// kernels (C = T: a 16-bit cache; C = __nv_fp8_e4m3: an e4m3 cache, same combine); included by
// the kernel table's instantiation files (instantiations/decode_d*.cu) and the dispatch (decode_dispatch.cu).
#pragma once
#include <cuda_runtime.h>

#include "cuda/decode/decode_combine.cuh"
#include "cuda/decode/decode_params.hpp"
#include "cuda/decode/decode_split_kernel.cuh"

namespace flashbox::cuda::decode {

template <typename T, int D, int S, typename C = T>
cudaError_t set_smem_attribute() {
  // Once per instantiation: the ring needs more than the default 48 KB of dynamic shared memory.
  static const cudaError_t once =
      cudaFuncSetAttribute(decode_split_kernel<T, D, S, C>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           int(SplitTraits<D, S, C>::kSmemBytes));
  return once;
}

template <typename T, int D, int S, typename C = T>
cudaError_t launch_split(const DecodeParams &p, cudaStream_t stream) {
  if (cudaError_t e = set_smem_attribute<T, D, S, C>(); e != cudaSuccess) return e;
  const dim3 grid(unsigned(p.num_splits), unsigned(p.heads_kv * p.row_tiles), unsigned(p.batch));
  decode_split_kernel<T, D, S, C><<<grid, kThreads, SplitTraits<D, S, C>::kSmemBytes, stream>>>(p);
  return cudaGetLastError();
}

template <typename T, int D>
cudaError_t launch_combine(const DecodeParams &p, cudaStream_t stream) {
  const int64_t rows = int64_t(p.batch) * p.heads_q * p.seqlen_q;
  const unsigned blocks = unsigned((rows + kCombineWarps - 1) / kCombineWarps);
  decode_combine_kernel<T, D><<<blocks, kCombineWarps * 32, 0, stream>>>(p);
  return cudaGetLastError();
}

template <typename T, int D, int S, typename C = T>
cudaError_t occupancy(int *ctas_per_sm, int64_t *bytes_in_flight) {
  if (cudaError_t e = set_smem_attribute<T, D, S, C>(); e != cudaSuccess) return e;
  *bytes_in_flight = SplitTraits<D, S, C>::kBytesInFlight;
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(ctas_per_sm, decode_split_kernel<T, D, S, C>, kThreads,
                                                       SplitTraits<D, S, C>::kSmemBytes);
}

}  // namespace flashbox::cuda::decode
