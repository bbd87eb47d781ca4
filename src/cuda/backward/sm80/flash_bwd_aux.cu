// The backward's two small memory-bound kernels (FlashAttention-2 §3.2's preprocessing and the dQ
// write-out of the atomic mode):
//   rowsum:     D_i = Σ_d dO_id · O_id, one warp per (batch, query head, row), fp32.
//   convert_dq: dq = scale · dq_accum, fp32 [batch, heads_q, seqlen_q, accum_ld] to the dtype through
//               the caller's strides (head_dim columns of each row), two elements per thread.
// Both run on the flat view of a variable-length batch (batch 1, seqlen_q = total_q): neither needs
// the sequence boundaries.
#include <algorithm>

#include "cuda/backward/sm80/bwd_device.cuh"
#include "cuda/backward/sm80/flash_bwd_params.hpp"

namespace flashbox::cuda::bwd {
namespace {

template <typename Elem>
__global__ void rowsum_kernel(const BwdParams p, int head_dim) {
  const int64_t rows = int64_t(p.batch) * p.heads_q * p.seqlen_q;
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const int i = int(row % p.seqlen_q);
  const int64_t bh = row / p.seqlen_q;
  const int h = int(bh % p.heads_q), b = int(bh / p.heads_q);
  const Elem *o = static_cast<const Elem *>(p.o) + b * p.o_stride[0] + int64_t(i) * p.o_stride[1] + h * p.o_stride[2];
  const Elem *d =
      static_cast<const Elem *>(p.dout) + b * p.do_stride[0] + int64_t(i) * p.do_stride[1] + h * p.do_stride[2];
  const float sum = warp_row_dot(o, d, head_dim, lane);
  if (lane == 0) p.dsum[row] = sum;
}

template <typename Elem>
__global__ void convert_dq_kernel(const BwdParams p, int head_dim) {
  using Tr = ElementTraits<Elem>;
  const int64_t pairs = int64_t(p.batch) * p.heads_q * p.seqlen_q * head_dim / 2;
  for (int64_t x = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; x < pairs; x += int64_t(gridDim.x) * blockDim.x) {
    const int64_t e = 2 * x;
    const int c = int(e % head_dim);
    const int64_t row = e / head_dim;
    const int i = int(row % p.seqlen_q);
    const int64_t bh = row / p.seqlen_q;
    const int h = int(bh % p.heads_q), b = int(bh / p.heads_q);
    const float2 v = *reinterpret_cast<const float2 *>(p.dq_accum + row * p.accum_ld + c);
    Elem *dst = static_cast<Elem *>(p.dq) + b * p.dq_stride[0] + int64_t(i) * p.dq_stride[1] + h * p.dq_stride[2] + c;
    *reinterpret_cast<uint32_t *>(dst) = Tr::pack(v.x * p.scale, v.y * p.scale);
  }
}

}  // namespace

cudaError_t launch_bwd_rowsum(const BwdParams &p, bool bf16, int head_dim, cudaStream_t stream) {
  const int64_t rows = int64_t(p.batch) * p.heads_q * p.seqlen_q;
  const unsigned blocks = unsigned((rows + 7) / 8);
  if (bf16)
    rowsum_kernel<__nv_bfloat16><<<blocks, 256, 0, stream>>>(p, head_dim);
  else
    rowsum_kernel<__half><<<blocks, 256, 0, stream>>>(p, head_dim);
  return cudaGetLastError();
}

cudaError_t launch_bwd_convert_dq(const BwdParams &p, bool bf16, int head_dim, cudaStream_t stream) {
  const int64_t pairs = int64_t(p.batch) * p.heads_q * p.seqlen_q * head_dim / 2;
  const unsigned blocks = unsigned(std::min<int64_t>((pairs + 255) / 256, 65535));
  if (bf16)
    convert_dq_kernel<__nv_bfloat16><<<blocks, 256, 0, stream>>>(p, head_dim);
  else
    convert_dq_kernel<__half><<<blocks, 256, 0, stream>>>(p, head_dim);
  return cudaGetLastError();
}

}  // namespace flashbox::cuda::bwd
