// The sm90 backward's prepare kernel: what it writes, flash_bwd_sm90_prepare.hpp.
#include "cuda/backward/sm90/flash_bwd_sm90_prepare.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

#include "core/softmax_scale.hpp"
#include "cuda/backward/sm80/bwd_device.cuh"
#include "cuda/common/element_type.cuh"
#include "cuda/hopper/grid_dependency.cuh"

namespace flashbox::sm90::bwd {
namespace {

template <typename Elem>
__global__ void prepare_kernel(const PrepArgs a) {
  using Tr = cuda::ElementTraits<Elem>;
  // The main kernel (launched programmatically) may be scheduled once every block got here: its
  // CTAs need a whole SM, so they take the SMs this grid's last wave leaves, and wait for this grid's
  // completion before they read anything it writes (flash_bwd_sm90_kernel.cuh).
  sm90::grid_dependents_launch();
  const int lpr = prep_lanes(a.kernel_d);
  const int64_t rows = int64_t(a.batch) * a.heads_q * a.seqlen_q_pad;
  const int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / lpr;
  const int sub = int(threadIdx.x % lpr), lane = int(threadIdx.x % 32);
  if (row >= rows) return;  // whole row groups leave together (lpr divides the block)
  float4 *z = reinterpret_cast<float4 *>(a.dq_accum + row * a.kernel_d);
  z[sub] = make_float4(0.f, 0.f, 0.f, 0.f);  // kernel_d / 4 float4: 2 lpr (d192: 48, lanes 0..15 twice)
  if (sub + lpr < a.kernel_d / 4) z[sub + lpr] = make_float4(0.f, 0.f, 0.f, 0.f);
  if (sub < a.sem_per_row && row * a.sem_per_row + sub < a.n_sem) a.dq_sem[row * a.sem_per_row + sub] = 0;
  const int i = int(row % a.seqlen_q_pad);
  const int64_t bh = row / a.seqlen_q_pad;
  const int h = int(bh % a.heads_q), b = int(bh / a.heads_q);
  if (i >= a.seqlen_q) {
    if (sub == 0) a.dsum[row] = 0.f, a.lse_log2[row] = INFINITY;
    return;
  }
  const Elem *o =
      static_cast<const Elem *>(a.o) + b * a.o_stride[0] + int64_t(i) * a.o_stride[1] + h * a.o_stride[2] + 8 * sub;
  const Elem *d = static_cast<const Elem *>(a.dout) + b * a.do_stride[0] + int64_t(i) * a.do_stride[1] +
                  h * a.do_stride[2] + 8 * sub;
  float sum = 0.f;
  if (8 * sub >= a.head_dim) {
    // past head_dim: nothing to read (the lanes still join the shuffle below)
  } else if (((reinterpret_cast<uintptr_t>(o) | reinterpret_cast<uintptr_t>(d)) & 15) == 0) {
    const uint4 x = *reinterpret_cast<const uint4 *>(o), y = *reinterpret_cast<const uint4 *>(d);
    const uint32_t xs[4] = {x.x, x.y, x.z, x.w}, ys[4] = {y.x, y.y, y.z, y.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 p = cuda::bwd::unpack_pair<Elem>(xs[k]), q = cuda::bwd::unpack_pair<Elem>(ys[k]);
      sum += p.x * q.x + p.y * q.y;
    }
  } else {  // O's strides need not be 16-byte multiples (dO's are: the TMA reads it)
#pragma unroll
    for (int k = 0; k < 8; ++k) sum += Tr::to_float(o[k]) * Tr::to_float(d[k]);
  }
  const unsigned group = (lpr == 32 ? 0xffffffffu : ((1u << lpr) - 1u) << (lane / lpr * lpr));
  for (int off = lpr / 2; off > 0; off >>= 1) sum += __shfl_xor_sync(group, sum, off);
  if (sub == 0) {
    a.dsum[row] = sum;
    // A row that saw no key (LSE -inf) gets +inf like a padding row, so that every p of it is
    // exp2(x - inf) = 0 whatever x: the plain and ALiBi paths mask their scores to -inf before the
    // exponentials, and -inf - (-inf) would be NaN (bwd_sm90_consumer.cuh, mask_scores).
    const float lse = a.lse[bh * a.seqlen_q + i];
    a.lse_log2[row] = lse == -INFINITY ? INFINITY : lse * kLog2e;
  }
}

}  // namespace

cudaError_t launch_prepare(const PrepArgs &a, bool bf16, int64_t rows, cudaStream_t stream) {
  const unsigned blocks = unsigned((rows * prep_lanes(a.kernel_d) + 255) / 256);
  if (bf16)
    prepare_kernel<__nv_bfloat16><<<blocks, 256, 0, stream>>>(a);
  else
    prepare_kernel<__half><<<blocks, 256, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace flashbox::sm90::bwd
