// The combine of split partial results on the GPU (combine_partials.hpp; the math in flashbox.h,
// "Combine of split partial results"):
//   M = max_s L_s,   L = M + log(sum_s exp(L_s - M)),   O = sum_s exp(L_s - L) O_s,
// a part with L_s = -inf skipped (its O_s is never read), O = 0 and L = -inf for a row whose parts all
// are -inf. The same exact merge as the split-KV decode's combine (cuda/decode/decode_combine.cuh),
// for a caller's own parts: any num_splits, any head_dim_v and the caller's strides, so it is its own
// kernel rather than an instantiation per head dim.
// Design: one warp per output row (b, t, h). The lanes stride over the splits for the max and the sum
// (warp shuffles reduce them), then over the row's columns, 32 consecutive fp32 values of every part
// per step (one 128-byte read per part and step: coalesced whatever the caller's row strides), each
// part's weight exp(L_s - L) recomputed per column step (an exp per part and 32 columns, cheap next to
// the part's 128 bytes). The kernel is memory-bound: it reads every part's row once and writes the
// output once. expf / logf, not the fast approximations: FlashAttention-3's test holds L to 1e-5.
// The output dtype is a template (fp32, fp16, bf16), three small instantiations.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "cuda/combine/combine_partials.hpp"
#include "cuda/common/cuda_check.hpp"

namespace flashbox::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int64_t kMaxBlocks = int64_t(1) << 20;

struct CombineParams {
  const float *out_partial, *lse_partial;
  int64_t op_stride[4], lp_stride[4];  // split, batch, token, head (elements)
  void *out;
  int64_t out_stride[3];  // batch, token, head
  float *lse;             // [batch, heads, seqlen] dense, or null
  int64_t num_splits, batch, seqlen, heads, head_dim_v, rows;
};

template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

template <typename T>
__global__ void __launch_bounds__(kWarpsPerBlock * 32) combine_partials_kernel(const CombineParams p) {
  const int lane = threadIdx.x & 31;
  const int64_t step = int64_t(gridDim.x) * kWarpsPerBlock;
  for (int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5); row < p.rows; row += step) {
    // row = (b * seqlen + t) * heads + h
    const int64_t h = row % p.heads, t = (row / p.heads) % p.seqlen, b = row / (p.heads * p.seqlen);
    const float *lse_row = p.lse_partial + b * p.lp_stride[1] + t * p.lp_stride[2] + h * p.lp_stride[3];
    const float *op_row = p.out_partial + b * p.op_stride[1] + t * p.op_stride[2] + h * p.op_stride[3];
    float m = -INFINITY;
    for (int64_t s = lane; s < p.num_splits; s += 32) m = fmaxf(m, lse_row[s * p.lp_stride[0]]);
    m = warp_max(m);
    float sum = 0.f;
    if (m != -INFINITY)
      for (int64_t s = lane; s < p.num_splits; s += 32) sum += expf(lse_row[s * p.lp_stride[0]] - m);
    sum = warp_sum(sum);
    const float lse = m == -INFINITY ? -INFINITY : m + logf(sum);
    T *dst = static_cast<T *>(p.out) + b * p.out_stride[0] + t * p.out_stride[1] + h * p.out_stride[2];
    for (int64_t c = lane; c < p.head_dim_v; c += 32) {
      float acc = 0.f;
      if (lse != -INFINITY)
        for (int64_t s = 0; s < p.num_splits; ++s) {
          const float l = lse_row[s * p.lp_stride[0]];
          if (l != -INFINITY) acc += expf(l - lse) * op_row[s * p.op_stride[0] + c];
        }
      dst[c] = from_float<T>(acc);
    }
    if (lane == 0 && p.lse) p.lse[(b * p.heads + h) * p.seqlen + t] = lse;
  }
}

}  // namespace

int combine_partials(const flashbox_combine_args &a) {
  CombineParams p{};
  p.out_partial = a.out_partial;
  p.lse_partial = a.lse_partial;
  for (int i = 0; i < 4; ++i) p.op_stride[i] = a.out_partial_stride[i], p.lp_stride[i] = a.lse_partial_stride[i];
  p.out = a.out;
  for (int i = 0; i < 3; ++i) p.out_stride[i] = a.out_stride[i];
  p.lse = a.lse;
  p.num_splits = a.num_splits, p.batch = a.batch, p.seqlen = a.seqlen, p.heads = a.heads;
  p.head_dim_v = a.head_dim_v;
  p.rows = a.batch * a.seqlen * a.heads;
  const int64_t blocks = (p.rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  const dim3 grid(unsigned(blocks < kMaxBlocks ? blocks : kMaxBlocks)), block(kWarpsPerBlock * 32);
  const auto stream = static_cast<cudaStream_t>(a.stream);
  switch (a.out_dtype) {
    case FLASHBOX_FLOAT16: combine_partials_kernel<__half><<<grid, block, 0, stream>>>(p); break;
    case FLASHBOX_BFLOAT16: combine_partials_kernel<__nv_bfloat16><<<grid, block, 0, stream>>>(p); break;
    default: combine_partials_kernel<float><<<grid, block, 0, stream>>>(p); break;
  }
  FLASHBOX_CUDA_CHECK_LAUNCH("combine_partials_kernel");
  return FLASHBOX_OK;
}

}  // namespace flashbox::cuda
