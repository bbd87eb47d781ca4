// Design: plain CUDA kernels for everything of a GPT-2 training step that is not a matrix product or
// attention. Memory-bound, so each is written for coalesced access and one pass where it can:
//   - row-wise ops (LayerNorm forward/backward, cross-entropy) give one warp (LN) or one block (CE,
//     rows of 50k logits) to a row; the row is re-read from L1/L2, not recomputed;
//   - reductions over rows (bias gradients; the LayerNorm's in layernorm_backward.cu) sum a chunk of
//     64 rows per thread and 8 columns into a partial, then the partials are summed in a fixed order
//     (32 warps per 32 columns, each warp every 32nd partial, then the warps in order); the gradient
//     norm sums fixed grid-stride slices per block, then the 1024 block sums in order. No float
//     atomics, so results do not depend on scheduling;
//   - the embedding gradient gathers, per token, the positions holding it (sorted on the host) and
//     sums them in position order.
// The cross-entropy reads a row of bf16 logits twice (max/sum online, then softmax - onehot) and
// writes the bf16 gradient over it: the logits of the whole batch never exist at once, the trainer
// calls it on row chunks.
#include "gpt2/train/train_kernels.cuh"

#include <algorithm>
#include <cmath>

#include "gpt2/cuda/warp_rows.cuh"
#include "gpt2/train/clip_factor.hpp"

namespace flashbox::gpt2::train {
namespace {

constexpr int kColChunk = 64;  // rows per partial column sum: many blocks in flight, partials summed by whole warps

int grid_for(int64_t work, int threads) {
  return int(std::max<int64_t>(1, std::min<int64_t>((work + threads - 1) / threads, 132 * 16)));
}

__global__ void embedding_forward_kernel(const int32_t *tok, const float *wte, const float *wpe, float *x, int64_t M,
                                         int T, int C) {
  const int64_t quads = M * (C / 4);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < quads; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t m = i / (C / 4);
    const int c = int(i % (C / 4)) * 4;
    const float4 a = *reinterpret_cast<const float4 *>(wte + int64_t(tok[m]) * C + c);
    const float4 b = *reinterpret_cast<const float4 *>(wpe + int64_t(m % T) * C + c);
    *reinterpret_cast<float4 *>(x + m * C + c) = make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
  }
}

__global__ void embedding_wte_kernel(const float *dx, const int32_t *order, const int32_t *starts, const int32_t *uniq,
                                     float *dwte, int C) {
  const int u = blockIdx.x;
  float *row = dwte + int64_t(uniq[u]) * C;
  // A frequent token has hundreds of positions: a whole row of threads per block and unrolled loads
  // keep that block short. The sum's order (positions ascending) is the same for any block size.
  const int k0 = starts[u], k1 = starts[u + 1];
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float acc = 0.0f;
#pragma unroll 8
    for (int k = k0; k < k1; ++k) acc += dx[int64_t(order[k]) * C + c];
    row[c] += acc;
  }
}

__global__ void embedding_wpe_kernel(const float *dx, float *dwpe, int B, int T, int C) {
  const int64_t n = int64_t(T) * C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    float acc = 0.0f;
    for (int b = 0; b < B; ++b) acc += dx[int64_t(b) * n + i];
    dwpe[i] += acc;
  }
}

__global__ void layernorm_forward_kernel(const float *x, const float *w, const float *b, bf16 *y, float *mean_out,
                                         float *rstd_out, int64_t M, int C) {
  // One warp per row (warp_rows.cuh, the evaluation's LayerNorm), keeping mean and rstd for the backward.
  const int64_t row = blockIdx.x * int64_t(blockDim.x / kWarp) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= M) return;
  float mean, rstd;
  layernorm_row(x + row * C, w, b, y + row * C, C, lane, mean, rstd);
  if (lane == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
}

// out[n] += sum_k partial[k, n]: a block of 32 warps takes 32 columns, warp w sums the partials
// k = w, w + 32, ... (lane = column), then the warp sums are added in warp order. Fixed order
// throughout. Up to three (partial, out) pairs in one launch (blockIdx.y): a LayerNorm's dw, db and
// the bias below. 32 warps: a few hundred partials are a few loads per thread, all in flight.
constexpr int kFinishWarps = 32;
struct FinishArgs {
  const float *partial[3];
  float *out[3];
};
__global__ void __launch_bounds__(kFinishWarps *kWarp)
    colsum_finish_wide_kernel(const FinishArgs a, int64_t chunks, int64_t N) {
  __shared__ float s[kFinishWarps][kWarp + 1];
  const float *partial = a.partial[blockIdx.y];
  const int lane = threadIdx.x % kWarp, w = threadIdx.x / kWarp;
  const int64_t n = blockIdx.x * int64_t(kWarp) + lane;
  float acc = 0.0f;
  if (n < N) {
#pragma unroll 8
    for (int64_t k = w; k < chunks; k += kFinishWarps) acc += partial[k * N + n];
  }
  s[w][lane] = acc;
  __syncthreads();
  if (w == 0 && n < N) {
    float t = 0.0f;
    for (int k = 0; k < kFinishWarps; ++k) t += s[k][lane];
    a.out[blockIdx.y][n] += t;
  }
}

// Column sum of bf16 [M, N] (N % 8 == 0): a thread sums 8 columns (one 16-byte load per row) over
// the chunk's rows in row order.
__global__ void colsum_partial_bf16x8_kernel(const bf16 *in, int64_t M, int64_t N, float *partial, int rows) {
  const int64_t c8 = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) * 8;
  const int64_t chunk = blockIdx.y;
  if (c8 >= N) return;
  const int64_t m0 = chunk * rows, m1 = std::min<int64_t>(M, m0 + rows);
  float acc[8] = {};
#pragma unroll 4
  for (int64_t m = m0; m < m1; ++m) {
    uint4 pack = *reinterpret_cast<const uint4 *>(in + m * N + c8);
    const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&pack);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 f = __bfloat1622float2(h[k]);
      acc[2 * k] += f.x;
      acc[2 * k + 1] += f.y;
    }
  }
  float4 *out = reinterpret_cast<float4 *>(partial + chunk * N + c8);
  out[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
  out[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
}

__global__ void to_bf16_kernel(const float *in, bf16 *out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n / 4; i += int64_t(gridDim.x) * blockDim.x) {
    const float4 v = reinterpret_cast<const float4 *>(in)[i];
    reinterpret_cast<__nv_bfloat162 *>(out)[2 * i] = __floats2bfloat162_rn(v.x, v.y);
    reinterpret_cast<__nv_bfloat162 *>(out)[2 * i + 1] = __floats2bfloat162_rn(v.z, v.w);
  }
}

constexpr int kCeThreads = 512;

__device__ void merge_softmax(float &m, float &s, float m2, float s2) {
  const float mn = fmaxf(m, m2);
  if (mn == -INFINITY) return;
  s = s * __expf(m - mn) + s2 * __expf(m2 - mn);
  m = mn;
}

__global__ void __launch_bounds__(kCeThreads)
    cross_entropy_inplace_kernel(bf16 *logits, int64_t ld, int V, const int32_t *targets, float *loss, bool with_grad,
                                 float grad_scale) {
  const int64_t r = blockIdx.x;
  bf16 *row = logits + r * ld;
  __nv_bfloat162 *row2 = reinterpret_cast<__nv_bfloat162 *>(row);  // ld is even (a multiple of 128)
  float mx = -INFINITY, sum = 0.0f;
  for (int j = threadIdx.x; 2 * j < V; j += kCeThreads) {
    const float2 v = __bfloat1622float2(row2[j]);
    merge_softmax(mx, sum, v.x, 1.0f);
    if (2 * j + 1 < V) merge_softmax(mx, sum, v.y, 1.0f);
  }
  for (int o = kWarp / 2; o > 0; o /= 2) {
    const float m2 = __shfl_xor_sync(0xffffffffu, mx, o), s2 = __shfl_xor_sync(0xffffffffu, sum, o);
    merge_softmax(mx, sum, m2, s2);
  }
  __shared__ float sm[kCeThreads / kWarp], ss[kCeThreads / kWarp];
  __shared__ float row_max, row_sum;
  if (threadIdx.x % kWarp == 0) {
    sm[threadIdx.x / kWarp] = mx;
    ss[threadIdx.x / kWarp] = sum;
  }
  __syncthreads();
  const int target = targets[r];
  if (threadIdx.x == 0) {
    for (int k = 1; k < kCeThreads / kWarp; ++k) merge_softmax(mx, sum, sm[k], ss[k]);
    row_max = mx;
    row_sum = sum;
    loss[r] = mx + logf(sum) - __bfloat162float(row[target]);
  }
  if (!with_grad) return;
  __syncthreads();  // thread 0 has read row[target] before anyone overwrites it
  const float m = row_max, inv = 1.0f / row_sum;
  for (int j = threadIdx.x; 2 * j < ld; j += kCeThreads) {
    const float2 v = __bfloat1622float2(row2[j]);
    const int i = 2 * j;
    const float g0 = i < V ? (__expf(v.x - m) * inv - (i == target ? 1.0f : 0.0f)) * grad_scale : 0.0f;
    const float g1 = i + 1 < V ? (__expf(v.y - m) * inv - (i + 1 == target ? 1.0f : 0.0f)) * grad_scale : 0.0f;
    row2[j] = __floats2bfloat162_rn(g0, g1);
  }
}

// The same row held in registers: one 16-byte load per 8 logits, read once from memory and written
// once (the kernel above reads a row twice and takes two exponentials per logit in its online pass).
// A thread keeps up to kCeRowLoads loads, so rows up to kCeThreads * kCeRowLoads * 8 = 53,248 logits
// (GPT-2's padded 50,304 included); wider rows take the kernel above. 64 registers (ptxas, sm_90a, no
// spills): two CTAs per SM, so one's loads overlap the other's reductions and exponentials. The max,
// then the sum of exponentials, each reduced across the block in a fixed order (deterministic).
constexpr int kCeRowLoads = 13, kCeVec = 8;

__device__ float block_reduce(float v, bool is_max, float *scratch) {
  for (int o = kWarp / 2; o > 0; o /= 2) {
    const float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = is_max ? fmaxf(v, w) : v + w;
  }
  __syncthreads();  // the scratch's previous use is over
  if (threadIdx.x % kWarp == 0) scratch[threadIdx.x / kWarp] = v;
  __syncthreads();
  v = scratch[0];
  for (int k = 1; k < kCeThreads / kWarp; ++k) v = is_max ? fmaxf(v, scratch[k]) : v + scratch[k];
  return v;
}

__global__ void __launch_bounds__(kCeThreads, 2)
    cross_entropy_rows_kernel(bf16 *logits, int64_t ld, int V, const int32_t *targets, float *loss, bool with_grad,
                              float grad_scale) {
  const int64_t r = blockIdx.x;
  bf16 *row = logits + r * ld;
  uint4 *vec = reinterpret_cast<uint4 *>(row);  // ld is a multiple of 8 and rows start 16-byte aligned
  const int n_vec = int(ld / kCeVec), target = targets[r];
  __shared__ float scratch[kCeThreads / kWarp];
  // Thread 0 reads the target's logit before the reductions' barriers, so before any thread writes.
  const float target_logit = threadIdx.x == 0 ? __bfloat162float(row[target]) : 0.0f;
  uint4 x[kCeRowLoads];
  float mx = -INFINITY;
#pragma unroll
  for (int k = 0; k < kCeRowLoads; ++k) {
    const int j = int(threadIdx.x) + k * kCeThreads;
    if (j < n_vec) {
      x[k] = vec[j];
      const bf16 *e = reinterpret_cast<const bf16 *>(&x[k]);
#pragma unroll
      for (int t = 0; t < kCeVec; ++t)
        if (j * kCeVec + t < V) mx = fmaxf(mx, __bfloat162float(e[t]));
    }
  }
  const float m = block_reduce(mx, true, scratch);
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < kCeRowLoads; ++k) {
    const int j = int(threadIdx.x) + k * kCeThreads;
    if (j < n_vec) {
      const bf16 *e = reinterpret_cast<const bf16 *>(&x[k]);
#pragma unroll
      for (int t = 0; t < kCeVec; ++t)
        if (j * kCeVec + t < V) sum += __expf(__bfloat162float(e[t]) - m);
    }
  }
  const float total = block_reduce(sum, false, scratch);
  if (threadIdx.x == 0) loss[r] = m + logf(total) - target_logit;
  if (!with_grad) return;
  const float inv = 1.0f / total;
#pragma unroll
  for (int k = 0; k < kCeRowLoads; ++k) {
    const int j = int(threadIdx.x) + k * kCeThreads;
    if (j < n_vec) {
      bf16 *e = reinterpret_cast<bf16 *>(&x[k]);
#pragma unroll
      for (int t = 0; t < kCeVec; ++t) {
        const int i = j * kCeVec + t;
        const float g = i < V ? (__expf(__bfloat162float(e[t]) - m) * inv - (i == target ? 1.0f : 0.0f)) * grad_scale
                              : 0.0f;
        e[t] = __float2bfloat16_rn(g);
      }
      vec[j] = x[k];
    }
  }
}

constexpr int kNormBlocks = 1024, kNormThreads = 256;

__global__ void sum_squares_partial_kernel(const float *x, int64_t n, float *partial) {
  float acc = 0.0f;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    acc += x[i] * x[i];
  acc = warp_sum(acc);
  __shared__ float s[kNormThreads / kWarp];
  if (threadIdx.x % kWarp == 0) s[threadIdx.x / kWarp] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = 0.0f;
    for (int k = 0; k < kNormThreads / kWarp; ++k) t += s[k];
    partial[blockIdx.x] = t;
  }
}

__global__ void sum_squares_finish_kernel(const float *partial, double *out) {
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    double t = 0.0;
    for (int k = 0; k < kNormBlocks; ++k) t += double(partial[k]);
    *out = t;
  }
}

__global__ void adamw_kernel(float *p, bf16 *pb, const float *g, float *m, float *v, int64_t n, float lr, float b1,
                             float b2, float eps, float wd, float grad_mult, const double *norm_sq, float clip,
                             float bias1, float bias2) {
  if (norm_sq != nullptr) grad_mult = clip_factor(sqrt(*norm_sq), clip);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float gi = g[i] * grad_mult;
    const float mi = b1 * m[i] + (1.0f - b1) * gi;
    const float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float mhat = mi / bias1, vhat = vi / bias2;
    const float pi = p[i] - lr * (mhat / (sqrtf(vhat) + eps) + wd * p[i]);
    p[i] = pi;
    pb[i] = __float2bfloat16_rn(pi);
  }
}

__global__ void mean_add_kernel(const float *x, int64_t n, double *acc) {
  __shared__ double s[256];
  double t = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) t += double(x[i]);
  s[threadIdx.x] = t;
  __syncthreads();
  for (int w = 128; w > 0; w /= 2) {
    if (int(threadIdx.x) < w) s[threadIdx.x] += s[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) *acc += s[0] / double(n);
}

constexpr int kRowsPerBlock = 8;

}  // namespace

void mean_add(const float *x, int64_t n, double *acc) { mean_add_kernel<<<1, 256>>>(x, n, acc); }

void embedding_forward(const int32_t *tokens, const float *wte, const float *wpe, float *x, int64_t M, int T, int C) {
  embedding_forward_kernel<<<grid_for(M * C / 4, 256), 256>>>(tokens, wte, wpe, x, M, T, C);
}

void embedding_backward_wte(const float *dx, const int32_t *order, const int32_t *starts, const int32_t *uniq,
                            int n_unique, float *dwte, int C) {
  const int threads = std::min(1024, (C + kWarp - 1) / kWarp * kWarp);
  if (n_unique > 0) embedding_wte_kernel<<<n_unique, threads>>>(dx, order, starts, uniq, dwte, C);
}

void embedding_backward_wpe(const float *dx, float *dwpe, int B, int T, int C) {
  embedding_wpe_kernel<<<grid_for(int64_t(T) * C, 256), 256>>>(dx, dwpe, B, T, C);
}

void layernorm_forward(const float *x, const float *w, const float *b, bf16 *y, float *mean, float *rstd, int64_t M,
                       int C) {
  layernorm_forward_kernel<<<int((M + kRowsPerBlock - 1) / kRowsPerBlock), kRowsPerBlock * kWarp>>>(x, w, b, y, mean,
                                                                                                    rstd, M, C);
}

int64_t colsum_scratch_bytes(int64_t M, int64_t N) { return 2 * ((M + kColChunk - 1) / kColChunk) * N * 4; }

static void colsum_finish(const float *partial, int64_t chunks, int64_t N, float *out) {
  colsum_finish_wide_kernel<<<unsigned((N + kWarp - 1) / kWarp), kFinishWarps * kWarp>>>(
      FinishArgs{{partial, partial, partial}, {out, out, out}}, chunks, N);
}

void colsum_finish_rows(const float *const *partials, float *const *outs, int count, int64_t chunks, int64_t N) {
  FinishArgs a{};
  for (int i = 0; i < 3; ++i) {
    a.partial[i] = partials[std::min(i, count - 1)];
    a.out[i] = outs[std::min(i, count - 1)];
  }
  colsum_finish_wide_kernel<<<dim3(unsigned((N + kWarp - 1) / kWarp), unsigned(count)), kFinishWarps * kWarp>>>(
      a, chunks, N);
}

void colsum_add(const bf16 *in, float *out, int64_t M, int64_t N, float *scratch) {
  const int64_t chunks = (M + kColChunk - 1) / kColChunk;
  const int threads = 128;
  const dim3 grid(unsigned((N / 8 + threads - 1) / threads), unsigned(chunks));
  colsum_partial_bf16x8_kernel<<<grid, threads>>>(in, M, N, scratch, kColChunk);
  colsum_finish(scratch, chunks, N, out);
}

void to_bf16(const float *in, bf16 *out, int64_t n) { to_bf16_kernel<<<grid_for(n / 4, 256), 256>>>(in, out, n); }

void cross_entropy_inplace(bf16 *logits, int64_t ld, int V, const int32_t *targets, int64_t R, float *loss,
                           bool with_grad, float grad_scale) {
  if (ld % kCeVec == 0 && ld <= int64_t(kCeThreads) * kCeRowLoads * kCeVec)
    cross_entropy_rows_kernel<<<unsigned(R), kCeThreads>>>(logits, ld, V, targets, loss, with_grad, grad_scale);
  else
    cross_entropy_inplace_kernel<<<unsigned(R), kCeThreads>>>(logits, ld, V, targets, loss, with_grad, grad_scale);
}

void sum_squares(const float *x, int64_t n, float *scratch, double *out) {
  sum_squares_partial_kernel<<<kNormBlocks, kNormThreads>>>(x, n, scratch);
  sum_squares_finish_kernel<<<1, 32>>>(scratch, out);
}

void adamw(float *p, bf16 *p_bf16, const float *g, float *m, float *v, int64_t n, float lr, float beta1, float beta2,
           float eps, float wd, float grad_mult, const double *norm_sq, float clip, float bias1, float bias2) {
  adamw_kernel<<<grid_for(n, 256), 256>>>(p, p_bf16, g, m, v, n, lr, beta1, beta2, eps, wd, grad_mult, norm_sq, clip,
                                          bias1, bias2);
}

}  // namespace flashbox::gpt2::train
