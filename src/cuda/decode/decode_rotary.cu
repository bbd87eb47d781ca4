// Rotary embedding for the decode family (only with rotary_cos/rotary_sin): one kernel writes the new
// keys into the cache turned to their positions (values copied as they are), one writes q turned into
// a contiguous scratch copy that the split kernel then reads. One thread per element; each reads its
// rotary partner and the pair's cos/sin (kvcache::rotary_pair). fp32 math without fused multiply-adds,
// as in the CPU implementation, so the cache holds the same bits on both devices.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/kvcache_rules.hpp"
#include "cuda/common/element_type.cuh"
#include "cuda/decode/decode_append_slot.cuh"
#include "cuda/decode/decode_params.hpp"

namespace flashbox::cuda {
namespace {

// Element e of `row` after the rotation to `pos` (e >= rotary_dim: unchanged).
template <typename T>
__device__ __forceinline__ float rotated(const T *row, int e, int64_t pos, const RotaryParams &r) {
  using Tr = ElementTraits<T>;
  const int half = r.rotary_dim / 2;
  if (e >= r.rotary_dim) return Tr::to_float(row[e]);
  const int m = r.interleaved ? e / 2 : e % half;
  int64_t i0, i1;
  kvcache::rotary_pair(m, r.rotary_dim, r.interleaved != 0, i0, i1);
  const float x0 = Tr::to_float(row[i0]), x1 = Tr::to_float(row[i1]);
  const T *cs = static_cast<const T *>(r.cos), *sn = static_cast<const T *>(r.sin);
  const float c = Tr::to_float(cs[pos * half + m]), s = Tr::to_float(sn[pos * half + m]);
  return e == i0 ? __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s)) : __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
}

template <typename T>
__global__ void append_rotary_kernel(const DecodeParams p, const RotaryParams r, int head_dim) {
  using Tr = ElementTraits<T>;
  const int64_t n = int64_t(p.batch) * p.seqlen_new * p.heads_kv * head_dim;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < n; idx += int64_t(gridDim.x) * blockDim.x) {
    const int e = int(idx % head_dim);
    AppendSlot s;
    if (!append_slot(p, idx / head_dim, s)) continue;
    const T *kn = static_cast<const T *>(p.k_new) + s.k_new;
    const T *vn = static_cast<const T *>(p.v_new) + s.v_new;
    const int64_t pos = s.cache_row;  // kvcache_rules.hpp: positions ignore cache_leftpad
    const int64_t pos_c = pos < 0 ? 0 : (pos >= p.capacity ? p.capacity - 1 : pos);  // tables cover the capacity
    static_cast<T *>(p.k_cache)[s.k_cache + e] = Tr::from_float(rotated(kn, e, pos_c, r));
    static_cast<T *>(p.v_cache)[s.v_cache + e] = vn[e];
  }
}

template <typename T>
__global__ void rotate_q_kernel(const DecodeParams p, const RotaryParams r, T *q_out, int head_dim) {
  using Tr = ElementTraits<T>;
  const int64_t n = int64_t(p.batch) * p.seqlen_q * p.heads_q * head_dim;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < n; idx += int64_t(gridDim.x) * blockDim.x) {
    const int e = int(idx % head_dim);
    int64_t rest = idx / head_dim;
    const int h = int(rest % p.heads_q);
    rest /= p.heads_q;
    const int i = int(rest % p.seqlen_q);
    const int b = int(rest / p.seqlen_q);
    const T *q = static_cast<const T *>(p.q) + b * p.q_stride[0] + i * p.q_stride[1] + h * p.q_stride[2];
    int64_t pos = kvcache::rotary_query_position(p.cache_seqlens[b], i,
                                                 p.causal || p.has_window);
    pos = pos < 0 ? 0 : (pos >= p.capacity ? p.capacity - 1 : pos);
    q_out[idx] = Tr::from_float(rotated(q, e, pos, r));
  }
}

unsigned blocks_for(int64_t n) {
  const int64_t b = (n + 255) / 256;
  return unsigned(b < 65535 ? b : 65535);
}

}  // namespace

cudaError_t launch_decode_append_rotary(const DecodeParams &p, const RotaryParams &r, int head_dim, bool bf16,
                                        cudaStream_t stream) {
  const int64_t n = int64_t(p.batch) * p.seqlen_new * p.heads_kv * head_dim;
  if (n == 0) return cudaSuccess;
  if (bf16)
    append_rotary_kernel<__nv_bfloat16><<<blocks_for(n), 256, 0, stream>>>(p, r, head_dim);
  else
    append_rotary_kernel<__half><<<blocks_for(n), 256, 0, stream>>>(p, r, head_dim);
  return cudaGetLastError();
}

cudaError_t launch_decode_rotate_q(const DecodeParams &p, const RotaryParams &r, void *q_out, int head_dim, bool bf16,
                                   cudaStream_t stream) {
  const int64_t n = int64_t(p.batch) * p.seqlen_q * p.heads_q * head_dim;
  if (bf16)
    rotate_q_kernel<__nv_bfloat16>
        <<<blocks_for(n), 256, 0, stream>>>(p, r, static_cast<__nv_bfloat16 *>(q_out), head_dim);
  else
    rotate_q_kernel<__half><<<blocks_for(n), 256, 0, stream>>>(p, r, static_cast<__half *>(q_out), head_dim);
  return cudaGetLastError();
}

}  // namespace flashbox::cuda
