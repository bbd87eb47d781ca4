// The sm90 backward's prepare kernel (flash_bwd_sm90_prepare.cu; its role in the launch chain:
// flash_bwd_sm90.cu's header): per padded row, D = rowsum(dO * O), LSE * log2 e (+inf for padding rows
// and rows that saw no key), the row's share of the dQ accumulator and semaphores zeroed.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace flashbox::sm90::bwd {

struct PrepArgs {
  const void *o, *dout;
  const float *lse;
  int64_t o_stride[3], do_stride[3];
  float *lse_log2, *dsum;
  float *dq_accum;  // zeroed: rows * kernel_d floats
  int *dq_sem;      // zeroed: n_sem ints (deterministic mode), else null
  int64_t n_sem;
  int sem_per_row;  // semaphore ints zeroed per row: 1 (fixed length), NWG (varlen: a slot per first row)
  int batch, heads_q, seqlen_q, seqlen_q_pad, head_dim, kernel_d;  // kernel_d: the instantiation's (>= head_dim)
};

// prep_lanes(kernel_d) lanes per padded row (8, 16 or 32: kernel_d / 8, and 32 for 192, where 24
// would let rows straddle warps), 16 bytes of O and of dO each: two 16-byte loads in flight per lane
// (one warp per row, 4 bytes a lane, left prepare and the memset it replaced at ~2x cuDNN's time on
// the H200). Past head_dim (a multiple of 8) the lanes add nothing but zero
// their share of the accumulator row (kernel_d / 4 float4, lane by lane).
__host__ __device__ inline int prep_lanes(int kernel_d) { return kernel_d == 192 ? 32 : kernel_d / 8; }

// prepare_kernel over `rows` padded rows (prep_lanes(kernel_d) lanes each), launched normally: its
// inputs come from whatever ran before in the stream; it lets the next grid launch early.
cudaError_t launch_prepare(const PrepArgs &a, bool bf16, int64_t rows, cudaStream_t stream);

}  // namespace flashbox::sm90::bwd
