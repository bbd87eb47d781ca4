// Combine kernel of the split-KV decode: merges the num_splits partial results of every query row by
// their log-sum-exp, exactly (the online softmax's merge, done once):
//   LSE = M + log(sum_s exp(lse_s - M)),  O = sum_s exp(lse_s - LSE) * O_s,  M = max_s lse_s,
// where O_s is split s's normalised fp32 output. A split that saw no key has lse_s = -inf and weight 0;
// a row no split saw gets O = 0, LSE = -inf. A learnable sink joins once, here, as one more term
// exp(sink) of the denominator (cuda/common/sink.cuh; a row no split saw then gets O = 0, LSE = the
// sink). One warp per row, head_dim / 32 values per lane.
#pragma once
#include <cstdint>

#include "cuda/common/element_type.cuh"
#include "cuda/common/sink.cuh"
#include "cuda/decode/decode_params.hpp"

namespace flashbox::cuda::decode {

constexpr int kCombineWarps = 4;

template <typename T, int D>
__global__ void __launch_bounds__(kCombineWarps * 32) decode_combine_kernel(const DecodeParams p) {
  constexpr int kPer = D / 32;
  const int lane = threadIdx.x & 31;
  const int64_t rows_total = int64_t(p.batch) * p.heads_q * p.seqlen_q;
  const int64_t row = int64_t(blockIdx.x) * kCombineWarps + (threadIdx.x >> 5);
  if (row >= rows_total) return;
  const int S = p.num_splits;
  float m = -INFINITY;
  for (int s = lane; s < S; s += 32) m = fmaxf(m, p.lse_partial[s * rows_total + row]);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  float out[kPer];
#pragma unroll
  for (int x = 0; x < kPer; ++x) out[x] = 0.f;
  float sum = 0.f;
  if (m != -INFINITY) {
    for (int s = 0; s < S; ++s) {
      const float w = __expf(p.lse_partial[s * rows_total + row] - m);
      sum += w;
      const float *src = p.o_partial + (s * rows_total + row) * D + lane * kPer;
#pragma unroll
      for (int x = 0; x < kPer; ++x) out[x] += w * src[x];
    }
  }
  // row = (b * heads_q + hq) * seqlen_q + i
  const int i = int(row % p.seqlen_q), hq = int((row / p.seqlen_q) % p.heads_q),
            b = int(row / (int64_t(p.seqlen_q) * p.heads_q));
  float alpha = 1.f;
  if (p.learnable_sink) {  // fold_sink works in base 2: m and the sink to log2 units and m back
    constexpr float kLog2e = 1.4426950408889634f;
    float m2 = m * kLog2e;
    alpha = fold_sink(m2, sum, p.learnable_sink[hq] * kLog2e);
    m = m2 * 0.6931471805599453f;
  }
  const float inv = (sum > 0.f ? 1.f / sum : 0.f) * alpha;  // alpha 1: exactly the no-sink value
  T *dst = static_cast<T *>(p.o) + b * p.o_stride[0] + i * p.o_stride[1] + hq * p.o_stride[2] + lane * kPer;
  // Columns past the call's head_dim (a multiple of 8; kPer divides 8) are the instantiation's padding.
  if (lane * kPer < p.head_dim) {
#pragma unroll
    for (int x = 0; x < kPer; x += 2) {
      const uint32_t packed = ElementTraits<T>::pack(out[x] * inv, out[x + 1] * inv);
      *reinterpret_cast<uint32_t *>(dst + x) = packed;
    }
  }
  if (lane == 0 && p.lse) p.lse[row] = sum > 0.f ? m + __logf(sum) : -INFINITY;
}

}  // namespace flashbox::cuda::decode
