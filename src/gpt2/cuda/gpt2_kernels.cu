#include "gpt2/cuda/gpt2_kernels.cuh"

#include <cmath>

#include "gpt2/cuda/warp_rows.cuh"

namespace flashbox::gpt2 {
namespace {


__global__ void embedding_kernel(const int32_t *tokens, const __nv_bfloat16 *wte, const __nv_bfloat16 *wpe, float *x,
                                 int64_t rows, int T, int C) {
  // One thread per 4 channels: two bf16x2 loads from each table, one float4 store.
  const int64_t quads = rows * (C / 4);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < quads; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t m = i / (C / 4);
    const int c = int(i % (C / 4)) * 4;
    const auto *te = reinterpret_cast<const __nv_bfloat162 *>(wte + int64_t(tokens[m]) * C + c);
    const auto *pe = reinterpret_cast<const __nv_bfloat162 *>(wpe + int64_t(m % T) * C + c);
    const float2 t0 = __bfloat1622float2(te[0]), t1 = __bfloat1622float2(te[1]);
    const float2 p0 = __bfloat1622float2(pe[0]), p1 = __bfloat1622float2(pe[1]);
    reinterpret_cast<float4 *>(x + m * C + c)[0] = make_float4(t0.x + p0.x, t0.y + p0.y, t1.x + p1.x, t1.y + p1.y);
  }
}

__global__ void layernorm_kernel(const float *x, const float *w, const float *b, __nv_bfloat16 *y, int64_t rows,
                                 int C) {
  // One warp per row (warp_rows.cuh).
  const int64_t row = blockIdx.x * int64_t(blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (row >= rows) return;
  float mean, rstd;
  layernorm_row(x + row * C, w, b, y + row * C, C, int(threadIdx.x % kWarp), mean, rstd);
}

__device__ float gelu_tanh(float v) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  return 0.5f * v * (1.0f + tanhf(kSqrt2OverPi * (v + 0.044715f * v * v * v)));
}

__global__ void gelu_kernel(__nv_bfloat16 *x, int64_t n) {
  // 8 bf16 (16 bytes) per thread per step.
  uint4 *x8 = reinterpret_cast<uint4 *>(x);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n / 8; i += int64_t(gridDim.x) * blockDim.x) {
    uint4 pack = x8[i];
    __nv_bfloat162 *h = reinterpret_cast<__nv_bfloat162 *>(&pack);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 f = __bfloat1622float2(h[k]);
      h[k] = __floats2bfloat162_rn(gelu_tanh(f.x), gelu_tanh(f.y));
    }
    x8[i] = pack;
  }
}

// Merges two (max, sum of exp(x - max)) pairs.
__device__ void merge_softmax(float &m, float &s, float m2, float s2) {
  const float mn = fmaxf(m, m2);
  if (mn == -INFINITY) return;
  s = s * __expf(m - mn) + s2 * __expf(m2 - mn);
  m = mn;
}

constexpr int kCeThreads = 512;

__global__ void __launch_bounds__(kCeThreads)
    cross_entropy_kernel(const float *logits, int64_t ld, int V, const int32_t *tokens, int64_t row0, int T,
                         float *loss) {
  // One block per row: a single pass keeps a running (max, sum) per thread (online softmax), then
  // the block merges them.
  const int64_t r = blockIdx.x;
  const int64_t m = row0 + r;
  if (m % T == T - 1) {
    if (threadIdx.x == 0) loss[m] = 0.0f;
    return;
  }
  const float *row = logits + r * ld;
  float mx = -INFINITY, sum = 0.0f;
  const int quads = V / 4;
  for (int q = threadIdx.x; q < quads; q += kCeThreads) {
    const float4 v = reinterpret_cast<const float4 *>(row)[q];
    const float vm = fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w));
    merge_softmax(mx, sum, vm, __expf(v.x - vm) + __expf(v.y - vm) + __expf(v.z - vm) + __expf(v.w - vm));
  }
  for (int i = quads * 4 + threadIdx.x; i < V; i += kCeThreads) merge_softmax(mx, sum, row[i], 1.0f);
  for (int o = kWarp / 2; o > 0; o /= 2) {
    const float m2 = __shfl_xor_sync(0xffffffffu, mx, o), s2 = __shfl_xor_sync(0xffffffffu, sum, o);
    merge_softmax(mx, sum, m2, s2);
  }
  __shared__ float sm[kCeThreads / kWarp], ss[kCeThreads / kWarp];
  if (threadIdx.x % kWarp == 0) {
    sm[threadIdx.x / kWarp] = mx;
    ss[threadIdx.x / kWarp] = sum;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int k = 1; k < kCeThreads / kWarp; ++k) merge_softmax(mx, sum, sm[k], ss[k]);
    loss[m] = mx + logf(sum) - row[tokens[m + 1]];
  }
}

int blocks_for(int64_t work, int threads) { return int(std::min<int64_t>((work + threads - 1) / threads, 132 * 32)); }

}  // namespace

void launch_embedding(const int32_t *tokens, const __nv_bfloat16 *wte, const __nv_bfloat16 *wpe, float *x, int64_t rows,
                      int T, int C, cudaStream_t stream) {
  embedding_kernel<<<blocks_for(rows * C / 4, 256), 256, 0, stream>>>(tokens, wte, wpe, x, rows, T, C);
}

void launch_layernorm(const float *x, const float *w, const float *b, __nv_bfloat16 *y, int64_t rows, int C,
                      cudaStream_t stream) {
  constexpr int kRowsPerBlock = 8;
  layernorm_kernel<<<int((rows + kRowsPerBlock - 1) / kRowsPerBlock), kRowsPerBlock * kWarp, 0, stream>>>(x, w, b, y,
                                                                                                          rows, C);
}

void launch_gelu(__nv_bfloat16 *x, int64_t n, cudaStream_t stream) {
  gelu_kernel<<<blocks_for(n / 8, 256), 256, 0, stream>>>(x, n);
}

void launch_cross_entropy(const float *logits, int64_t ld, int V, const int32_t *tokens, int64_t row0, int64_t rows,
                          int T, float *loss, cudaStream_t stream) {
  cross_entropy_kernel<<<int(rows), kCeThreads, 0, stream>>>(logits, ld, V, tokens, row0, T, loss);
}

}  // namespace flashbox::gpt2
