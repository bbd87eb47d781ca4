// Append kernel of the decode family: writes k_new/v_new [batch, seqlen_new, heads_kv, head_dim] into
// the cache in place at rows cache_seqlens[b] + i, through the block table for a paged cache. Runs on
// the call's stream before the split kernel, so the attention sees the new keys. A copy, 16 bytes per
// thread; a slot that is out of range (possible only with tables_trusted) is skipped, never written.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/decode/decode_append_slot.cuh"
#include "cuda/decode/decode_params.hpp"

namespace flashbox::cuda {
namespace {

__global__ void decode_append_kernel(const DecodeParams p, int chunks_per_row, int element_size) {
  const int64_t n = int64_t(p.batch) * p.seqlen_new * p.heads_kv * chunks_per_row;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < n; idx += int64_t(gridDim.x) * blockDim.x) {
    const int c = int(idx % chunks_per_row);
    AppendSlot s;
    if (!append_slot(p, idx / chunks_per_row, s)) continue;
    const int64_t byte = int64_t(c) * 16;
    const auto *ks = reinterpret_cast<const uint4 *>(static_cast<const char *>(p.k_new) + s.k_new * element_size + byte);
    const auto *vs = reinterpret_cast<const uint4 *>(static_cast<const char *>(p.v_new) + s.v_new * element_size + byte);
    *reinterpret_cast<uint4 *>(static_cast<char *>(p.k_cache) + s.k_cache * element_size + byte) = *ks;
    *reinterpret_cast<uint4 *>(static_cast<char *>(p.v_cache) + s.v_cache * element_size + byte) = *vs;
  }
}

}  // namespace

cudaError_t launch_decode_append(const DecodeParams &p, int head_dim, int element_size, cudaStream_t stream) {
  const int chunks = head_dim * element_size / 16;
  const int64_t n = int64_t(p.batch) * p.seqlen_new * p.heads_kv * chunks;
  if (n == 0) return cudaSuccess;
  const int threads = 256;
  const int64_t blocks = (n + threads - 1) / threads;
  decode_append_kernel<<<unsigned(blocks < 65535 ? blocks : 65535), threads, 0, stream>>>(p, chunks, element_size);
  return cudaGetLastError();
}

}  // namespace flashbox::cuda
