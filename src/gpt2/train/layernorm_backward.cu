// Design: LayerNorm's whole backward in one pass over its rows, with the column sum the next layer
// down needs folded in.
//
// The separate kernels read dy and x (fp32, M x C each) twice: once for dx, once more for the
// parameter gradients; and after the LayerNorm the residual gradient dx is read again to make its
// bf16 copy and its column sum (the bias gradient of the projection below). Here a block takes
// kRows consecutive rows, each of its kWarps warps every kWarps-th of them (fixed), and per row:
//   pass 1: mean(dy w) and mean(dy w xhat) (warp sums);
//   pass 2: dx = (accumulate ? dx : 0) + rstd (dy w - mean(dy w) - xhat mean(dy w xhat)), written in
//           fp32 and, with `next`, in bf16; the lane's columns add dy xhat, dy (and dx with `next`)
//           to the warp's accumulators in shared memory.
// Then the block sums its warps' accumulators in warp order into one partial row per block, and
// colsum_finish adds the partials in a fixed order. No atomics: the result does not depend on
// scheduling. A lane owns columns 4 lane + 128 j (float4), so no two lanes touch the same
// accumulator and the warp needs no barrier until the block's final sum.
#include "gpt2/train/train_kernels.cuh"

#include <algorithm>

#include "gpt2/cuda/warp_rows.cuh"

namespace flashbox::gpt2::train {
namespace {

constexpr int kWarps = 4, kRows = 32;


__device__ void add4(float4 &a, const float4 &b) {
  a.x += b.x, a.y += b.y, a.z += b.z, a.w += b.w;
}

template <bool kNext>
__global__ void __launch_bounds__(kWarps *kWarp)
    layernorm_backward_fused_kernel(const float *dy, const float *x, const float *mean_in, const float *rstd_in,
                                    const float *w, float *dx, bf16 *dx_bf16, bool accumulate, int64_t M, int C,
                                    float *part_w, float *part_b, float *part_x) {
  extern __shared__ float4 acc[];  // [kWarps][3][C / 4]
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, quads = C / 4;
  float4 *acc_w = acc + (warp * 3 + 0) * quads, *acc_b = acc + (warp * 3 + 1) * quads,
         *acc_x = acc + (warp * 3 + 2) * quads;
  const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int q = lane; q < quads; q += kWarp) acc_w[q] = acc_b[q] = acc_x[q] = zero;
  const float4 *w4 = reinterpret_cast<const float4 *>(w);
  const int64_t r0 = int64_t(blockIdx.x) * kRows, r1 = std::min<int64_t>(M, r0 + kRows);
  for (int64_t r = r0 + warp; r < r1; r += kWarps) {
    const float mean = mean_in[r], rstd = rstd_in[r];
    const float4 *dyr = reinterpret_cast<const float4 *>(dy + r * C), *xr = reinterpret_cast<const float4 *>(x + r * C);
    float a = 0.f, bsum = 0.f;
    for (int q = lane; q < quads; q += kWarp) {
      const float4 g = dyr[q], v = xr[q], ww = w4[q];
      a += g.x * ww.x + g.y * ww.y + g.z * ww.z + g.w * ww.w;
      bsum += g.x * ww.x * (v.x - mean) * rstd + g.y * ww.y * (v.y - mean) * rstd + g.z * ww.z * (v.z - mean) * rstd +
              g.w * ww.w * (v.w - mean) * rstd;
    }
    a = warp_sum(a) / float(C);
    bsum = warp_sum(bsum) / float(C);
    float4 *dxr = reinterpret_cast<float4 *>(dx + r * C);
    for (int q = lane; q < quads; q += kWarp) {
      const float4 g = dyr[q], v = xr[q], ww = w4[q];
      const float4 xh = make_float4((v.x - mean) * rstd, (v.y - mean) * rstd, (v.z - mean) * rstd, (v.w - mean) * rstd);
      float4 d = accumulate ? dxr[q] : zero;
      d.x += rstd * (g.x * ww.x - a - xh.x * bsum);
      d.y += rstd * (g.y * ww.y - a - xh.y * bsum);
      d.z += rstd * (g.z * ww.z - a - xh.z * bsum);
      d.w += rstd * (g.w * ww.w - a - xh.w * bsum);
      dxr[q] = d;
      add4(acc_w[q], make_float4(g.x * xh.x, g.y * xh.y, g.z * xh.z, g.w * xh.w));
      add4(acc_b[q], g);
      if constexpr (kNext) {
        __nv_bfloat162 *o = reinterpret_cast<__nv_bfloat162 *>(dx_bf16 + r * C) + 2 * q;
        o[0] = __floats2bfloat162_rn(d.x, d.y);
        o[1] = __floats2bfloat162_rn(d.z, d.w);
        add4(acc_x[q], d);
      }
    }
  }
  __syncthreads();
  for (int q = threadIdx.x; q < quads; q += blockDim.x) {
    float4 sw = zero, sb = zero, sx = zero;
    for (int k = 0; k < kWarps; ++k) {
      add4(sw, acc[(k * 3 + 0) * quads + q]);
      add4(sb, acc[(k * 3 + 1) * quads + q]);
      if constexpr (kNext) add4(sx, acc[(k * 3 + 2) * quads + q]);
    }
    reinterpret_cast<float4 *>(part_w + int64_t(blockIdx.x) * C)[q] = sw;
    reinterpret_cast<float4 *>(part_b + int64_t(blockIdx.x) * C)[q] = sb;
    if constexpr (kNext) reinterpret_cast<float4 *>(part_x + int64_t(blockIdx.x) * C)[q] = sx;
  }
}

template <bool kNext>
void launch(const float *dy, const float *x, const float *mean, const float *rstd, const float *w, float *dx,
            bf16 *dx_bf16, bool accumulate, int64_t M, int C, float *pw, float *pb, float *px, int64_t chunks) {
  const size_t smem = size_t(kWarps) * 3 * size_t(C) * 4;
  static size_t opted = 0;  // the largest dynamic shared memory this instantiation was allowed so far
  if (smem > 48 * 1024 && smem > opted) {
    cudaFuncSetAttribute(layernorm_backward_fused_kernel<kNext>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         int(smem));
    opted = smem;
  }
  layernorm_backward_fused_kernel<kNext>
      <<<unsigned(chunks), kWarps * kWarp, smem>>>(dy, x, mean, rstd, w, dx, dx_bf16, accumulate, M, C, pw, pb, px);
}

}  // namespace

int64_t layernorm_backward_fused_scratch_bytes(int64_t M, int C) { return 3 * ((M + kRows - 1) / kRows) * C * 4; }

void layernorm_backward_fused(const float *dy, const float *x, const float *mean, const float *rstd, const float *w,
                              float *dx, bool accumulate, float *dw, float *db, bf16 *dx_bf16, float *dbias_next,
                              int64_t M, int C, float *scratch) {
  const int64_t chunks = (M + kRows - 1) / kRows;
  float *pw = scratch, *pb = scratch + chunks * C, *px = scratch + 2 * chunks * C;
  if (dx_bf16)
    launch<true>(dy, x, mean, rstd, w, dx, dx_bf16, accumulate, M, C, pw, pb, px, chunks);
  else
    launch<false>(dy, x, mean, rstd, w, dx, nullptr, accumulate, M, C, pw, pb, px, chunks);
  const float *partials[3] = {pw, pb, px};
  float *outs[3] = {dw, db, dbias_next};
  colsum_finish_rows(partials, outs, dx_bf16 ? 3 : 2, chunks, C);
}

}  // namespace flashbox::gpt2::train
