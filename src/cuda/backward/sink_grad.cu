// See sink_grad.hpp.
#include "cuda/backward/sink_grad.hpp"

#include <cmath>

namespace flashbox::cuda::bwd {
namespace {

constexpr int kSinkGradThreads = 512;

__global__ void __launch_bounds__(kSinkGradThreads) sink_grad_kernel(const SinkGradArgs a) {
  __shared__ double partial[kSinkGradThreads];
  const int h = int(blockIdx.x);
  const double sink = a.sinks[h];
  double sum = 0.0;
  for (int b = 0; b < a.batch; ++b) {
    const int64_t bh = int64_t(b) * a.heads_q + h;
    const float *lse = a.lse + bh * a.seqlen_q;
    const float *dsum = a.dsum + bh * a.dsum_ld;
    for (int i = int(threadIdx.x); i < a.seqlen_q; i += kSinkGradThreads) {
      const float l = lse[i];
      if (l != -INFINITY) sum += exp(sink - double(l)) * double(dsum[i]);
    }
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
#pragma unroll
  for (int half = kSinkGradThreads / 2; half > 0; half /= 2) {
    if (int(threadIdx.x) < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) a.dsink[h] = float(-partial[0]);
}

}  // namespace

cudaError_t launch_sink_grad(const SinkGradArgs &a, cudaStream_t stream) {
  if (a.heads_q <= 0) return cudaSuccess;
  sink_grad_kernel<<<unsigned(a.heads_q), kSinkGradThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace flashbox::cuda::bwd
