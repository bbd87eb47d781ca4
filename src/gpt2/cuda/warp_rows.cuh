// Row-per-warp helpers shared by the GPT-2 evaluation kernels (gpt2_kernels.cu) and the trainer's
// (train/train_kernels.cu, train/layernorm_backward.cu): the warp-wide sum and the LayerNorm of one
// fp32 row into bf16, so that evaluation and training normalise with the same arithmetic.
#pragma once
#include <cuda_bf16.h>

namespace flashbox::gpt2 {

inline constexpr int kWarp = 32;

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// y = (x - mean) * rstd * w + b for one row xr of C floats (C a multiple of 4, 16-byte aligned), by
// the 32 lanes of a warp; rstd = 1 / sqrt(var + 1e-5). The row is read from memory once; the second
// and third passes hit L1. Every lane returns the row's mean and rstd.
__device__ __forceinline__ void layernorm_row(const float *xr, const float *w, const float *b, __nv_bfloat16 *y,
                                              int C, int lane, float &mean, float &rstd) {
  const float4 *x4 = reinterpret_cast<const float4 *>(xr);
  const int quads = C / 4;
  float s = 0.0f;
  for (int q = lane; q < quads; q += kWarp) {
    const float4 v = x4[q];
    s += v.x + v.y + v.z + v.w;
  }
  mean = warp_sum(s) / float(C);
  float ss = 0.0f;
  for (int q = lane; q < quads; q += kWarp) {
    const float4 v = x4[q];
    ss += (v.x - mean) * (v.x - mean) + (v.y - mean) * (v.y - mean) + (v.z - mean) * (v.z - mean) +
          (v.w - mean) * (v.w - mean);
  }
  rstd = rsqrtf(warp_sum(ss) / float(C) + 1e-5f);
  const float4 *w4 = reinterpret_cast<const float4 *>(w), *b4 = reinterpret_cast<const float4 *>(b);
  __nv_bfloat162 *yr = reinterpret_cast<__nv_bfloat162 *>(y);
  for (int q = lane; q < quads; q += kWarp) {
    const float4 v = x4[q], g = w4[q], o = b4[q];
    yr[2 * q] = __floats2bfloat162_rn((v.x - mean) * rstd * g.x + o.x, (v.y - mean) * rstd * g.y + o.y);
    yr[2 * q + 1] = __floats2bfloat162_rn((v.z - mean) * rstd * g.z + o.z, (v.w - mean) * rstd * g.w + o.w);
  }
}

}  // namespace flashbox::gpt2
