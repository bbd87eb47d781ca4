// Append kernel of the decode family for an e4m3 cache: writes k_new/v_new [batch, seqlen_new,
// heads_kv, head_dim] (bf16 or fp16) into the cache in place at rows cache_seqlens[b] + i, each value
// quantized on the way: e4m3(x / descale[b, g]), round to nearest even, saturated to +-448, 0 for a
// descale of 0 (core/kvcache_rules.hpp; decode_fp8_convert.cuh). One thread per 16 elements: two
// 16-byte loads of the new row, one 16-byte store to the cache. Runs on the call's stream before the
// split kernel; a slot out of range (possible only with tables_trusted) is skipped, never written.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/kvcache_rules.hpp"
#include "cuda/common/element_type.cuh"
#include "cuda/decode/decode_append_slot.cuh"
#include "cuda/decode/decode_fp8_convert.cuh"
#include "cuda/decode/decode_params.hpp"

namespace flashbox::cuda {
namespace {

// 16 consecutive values of T from `src` (16-byte aligned) to fp32.
template <typename T>
__device__ __forceinline__ void load16(const T *src, float (&x)[16]) {
  const uint4 a = reinterpret_cast<const uint4 *>(src)[0], b = reinterpret_cast<const uint4 *>(src)[1];
  const uint32_t w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    T pair[2];
    __builtin_memcpy(pair, &w[i], 4);
    x[2 * i] = ElementTraits<T>::to_float(pair[0]);
    x[2 * i + 1] = ElementTraits<T>::to_float(pair[1]);
  }
}

__device__ __forceinline__ uint4 quantize16(const float (&x)[16], float descale) {
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
    w[i] = uint32_t(decode::quantize_e4m3x2(x[4 * i], x[4 * i + 1], descale)) |
           (uint32_t(decode::quantize_e4m3x2(x[4 * i + 2], x[4 * i + 3], descale)) << 16);
  return make_uint4(w[0], w[1], w[2], w[3]);
}

template <typename T>
__global__ void decode_append_fp8_kernel(const DecodeParams p, int chunks_per_row) {
  const int64_t n = int64_t(p.batch) * p.seqlen_new * p.heads_kv * chunks_per_row;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < n; idx += int64_t(gridDim.x) * blockDim.x) {
    const int c = int(idx % chunks_per_row);
    const int64_t row = idx / chunks_per_row;  // (b, i, h), h fastest
    AppendSlot s;
    if (!append_slot(p, row, s)) continue;
    const int h = int(row % p.heads_kv);
    const int b = int(row / p.heads_kv / p.seqlen_new);
    const float kd = kvcache::descale_at(p.k_descale, p.k_descale_stride[0], p.k_descale_stride[1], b, h);
    const float vd = kvcache::descale_at(p.v_descale, p.v_descale_stride[0], p.v_descale_stride[1], b, h);
    float x[16];
    load16(static_cast<const T *>(p.k_new) + s.k_new + c * 16, x);
    *reinterpret_cast<uint4 *>(static_cast<uint8_t *>(p.k_cache) + s.k_cache + c * 16) = quantize16(x, kd);
    load16(static_cast<const T *>(p.v_new) + s.v_new + c * 16, x);
    *reinterpret_cast<uint4 *>(static_cast<uint8_t *>(p.v_cache) + s.v_cache + c * 16) = quantize16(x, vd);
  }
}

}  // namespace

cudaError_t launch_decode_append_fp8(const DecodeParams &p, int head_dim, bool bf16, cudaStream_t stream) {
  const int chunks = head_dim / 16;  // validation: a multiple of 16 for an fp8 cache on cuda
  const int64_t n = int64_t(p.batch) * p.seqlen_new * p.heads_kv * chunks;
  if (n == 0) return cudaSuccess;
  const int threads = 256;
  const int64_t blocks = (n + threads - 1) / threads;
  const unsigned grid = unsigned(blocks < 65535 ? blocks : 65535);
  if (bf16)
    decode_append_fp8_kernel<__nv_bfloat16><<<grid, threads, 0, stream>>>(p, chunks);
  else
    decode_append_fp8_kernel<__half><<<grid, threads, 0, stream>>>(p, chunks);
  return cudaGetLastError();
}

}  // namespace flashbox::cuda
