// Host side of the Hopper backward: when it applies, tensor maps, and the two memory-bound kernels
// around the main one:
//   prepare:    per (batch, query head, padded row): D = rowsum(dO ∘ O) and LSE · log2 e; padding
//               rows (>= seqlen_q, up to a whole query tile) get D = 0 and LSE = +inf, so P = 0.
//   convert_dq: dq = scale · dq_accum, read in the main kernel's fragment order (see
//               flash_bwd_sm90_kernel.cuh), written in the dtype through the caller's strides.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "cpu/reference_fp64.hpp"
#include "cuda/backward/bwd_device.cuh"
#include "cuda/backward/sm90/flash_bwd_sm90_kernel.cuh"
#include "cuda/backward/sm90/flash_bwd_sm90_launch.hpp"
#include "cuda/sm90/tma_host.hpp"

namespace flashbox::sm90::bwd {
namespace cpu = flashbox::cpu;
namespace {

constexpr float kLog2e = 1.4426950408889634f;

struct PrepArgs {
  const void *o, *dout;
  const float *lse;
  int64_t o_stride[3], do_stride[3];
  float *lse_log2, *dsum;
  int batch, heads_q, seqlen_q, seqlen_q_pad, head_dim;
};

// One warp per padded row.
template <typename Elem>
__global__ void prepare_kernel(const PrepArgs a) {
  const int64_t rows = int64_t(a.batch) * a.heads_q * a.seqlen_q_pad;
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const int i = int(row % a.seqlen_q_pad);
  const int64_t bh = row / a.seqlen_q_pad;
  const int h = int(bh % a.heads_q), b = int(bh / a.heads_q);
  if (i >= a.seqlen_q) {
    if (lane == 0) a.dsum[row] = 0.f, a.lse_log2[row] = INFINITY;
    return;
  }
  const Elem *o = static_cast<const Elem *>(a.o) + b * a.o_stride[0] + int64_t(i) * a.o_stride[1] + h * a.o_stride[2];
  const Elem *d =
      static_cast<const Elem *>(a.dout) + b * a.do_stride[0] + int64_t(i) * a.do_stride[1] + h * a.do_stride[2];
  const float sum = cuda::bwd::warp_row_dot(o, d, a.head_dim, lane);
  if (lane == 0) {
    a.dsum[row] = sum;
    a.lse_log2[row] = a.lse[bh * a.seqlen_q + i] * kLog2e;  // -inf stays -inf (the row is masked)
  }
}

struct ConvertArgs {
  const float *dq_accum;
  void *dq;
  int64_t dq_stride[3];
  int batch, heads_q, seqlen_q, num_m_blocks, block_m, head_dim;
  float scale;
};

// Element (row r, column c) of a 64 x 64 dQ chunk sits in register i of thread t of the warpgroup
// that computed it (docs/hopper.md §2.6) and was staged at float (i / 4 * 128 + t) * 4 + i % 4.
template <typename Elem>
__global__ void convert_dq_kernel(const ConvertArgs a) {
  using Tr = cuda::ElementTraits<Elem>;
  const int64_t pairs = int64_t(a.batch) * a.heads_q * a.seqlen_q * a.head_dim / 2;
  const int nd = a.head_dim / 64;
  for (int64_t x = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; x < pairs; x += int64_t(gridDim.x) * blockDim.x) {
    const int c = int(2 * x % a.head_dim);
    const int64_t row = 2 * x / a.head_dim;
    const int i = int(row % a.seqlen_q);
    const int64_t bh = row / a.seqlen_q;
    const int h = int(bh % a.heads_q), b = int(bh / a.heads_q);
    const int m = i / a.block_m, rr = i % a.block_m;
    const int chunk = (rr / 64) * nd + c / 64, r = rr % 64, cc = c % 64;
    const int t = (r / 16) * 32 + (r % 8) * 4 + (cc % 8) / 2;
    const int e = 2 * ((r % 16) / 8);
    const float *src = a.dq_accum + (bh * a.num_m_blocks + m) * int64_t(a.block_m) * a.head_dim + chunk * 4096 +
                       ((cc / 8) * 128 + t) * 4 + e;
    const float2 v = *reinterpret_cast<const float2 *>(src);
    Elem *dst = static_cast<Elem *>(a.dq) + b * a.dq_stride[0] + int64_t(i) * a.dq_stride[1] + h * a.dq_stride[2] + c;
    *reinterpret_cast<uint32_t *>(dst) = Tr::pack(v.x * a.scale, v.y * a.scale);
  }
}

int block_m_for(int64_t head_dim) { return head_dim == 64 ? 128 : 64; }

}  // namespace

bool plan_backward(const flashbox_attention_grad_args &g, Plan *plan, const char **why_not) {
  const auto no = [&](const char *reason) {
    if (why_not != nullptr) *why_not = reason;
    return false;
  };
  const flashbox_attention_args &a = g.fwd;
  const char *arch = std::getenv("FLASHBOX_BWD_ARCH");
  if (arch != nullptr && std::strcmp(arch, "sm80") == 0) return no("FLASHBOX_BWD_ARCH=sm80");
  if (g.deterministic) return no("deterministic mode runs the sm80 kernels (a fixed dQ order)");
  if (a.dtype != FLASHBOX_BFLOAT16 && a.dtype != FLASHBOX_FLOAT16) return no("the sm90 backward takes bf16 or fp16");
  if (a.head_dim != 64 && a.head_dim != 128) return no("the sm90 backward takes head_dim 64 or 128");
  if (a.seqlen_q < 1 || a.seqlen_k < 1) return no("empty sequences go to the sm80 path");
  if (const char *reason = sm90_unavailable_reason()) return no(reason);
  if (a.seqlen_q > INT32_MAX / 2 || a.seqlen_k > INT32_MAX / 2) return no("sequence too long for 32-bit coordinates");
  const TensorView views[4] = {{a.q, a.seqlen_q, a.heads_q, a.batch, a.q_stride},
                               {a.k, a.seqlen_k, a.heads_kv, a.batch, a.k_stride},
                               {a.v, a.seqlen_k, a.heads_kv, a.batch, a.v_stride},
                               {g.dout, a.seqlen_q, a.heads_q, a.batch, g.dout_stride}};
  for (const TensorView &v : views)
    if (!tma_describable(v)) return no("TMA needs 16-byte aligned q/k/v/dout and strides that are multiples of 16 B");
  const int bm = block_m_for(a.head_dim);
  const int64_t m_blocks = (a.seqlen_q + bm - 1) / bm;
  if ((a.seqlen_k + 127) / 128 > INT32_MAX || a.batch * a.heads_kv > 65535) return no("grid too large");
  plan->block_m = bm;
  plan->seqlen_q_pad = m_blocks * bm;
  plan->vec_bytes = a.batch * a.heads_q * plan->seqlen_q_pad * 4;
  plan->dq_accum_bytes = plan->vec_bytes * a.head_dim;
  return true;
}

cudaError_t run_backward(const flashbox_attention_grad_args &g, const Plan &plan, float *lse_log2, float *dsum,
                         float *dq_accum) {
  const flashbox_attention_args &a = g.fwd;
  const cudaStream_t stream = static_cast<cudaStream_t>(a.stream);
  const bool bf16 = a.dtype == FLASHBOX_BFLOAT16;
  const float scale = float(cpu::effective_softmax_scale(a));

  PrepArgs prep{a.o, g.dout, a.lse, {}, {}, lse_log2, dsum, int(a.batch), int(a.heads_q), int(a.seqlen_q),
                int(plan.seqlen_q_pad), int(a.head_dim)};
  for (int i = 0; i < 3; ++i) prep.o_stride[i] = a.o_stride[i], prep.do_stride[i] = g.dout_stride[i];
  const int64_t rows = a.batch * a.heads_q * plan.seqlen_q_pad;
  const unsigned prep_blocks = unsigned((rows + 7) / 8);
  if (bf16)
    prepare_kernel<__nv_bfloat16><<<prep_blocks, 256, 0, stream>>>(prep);
  else
    prepare_kernel<__half><<<prep_blocks, 256, 0, stream>>>(prep);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  if ((e = cudaMemsetAsync(dq_accum, 0, size_t(plan.dq_accum_bytes), stream)) != cudaSuccess) return e;

  BwdSm90Params p;
  std::memset(&p, 0, sizeof p);
  const CUtensorMapDataType type =
      bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  const TensorView q{a.q, a.seqlen_q, a.heads_q, a.batch, a.q_stride};
  const TensorView k{a.k, a.seqlen_k, a.heads_kv, a.batch, a.k_stride};
  const TensorView v{a.v, a.seqlen_k, a.heads_kv, a.batch, a.v_stride};
  const TensorView dout{g.dout, a.seqlen_q, a.heads_q, a.batch, g.dout_stride};
  if (!encode_map(&p.tm_q, &p.ord_q, type, q, a.head_dim, plan.block_m) ||
      !encode_map(&p.tm_do, &p.ord_do, type, dout, a.head_dim, plan.block_m) ||
      !encode_map(&p.tm_k, &p.ord_k, type, k, a.head_dim, 128) ||
      !encode_map(&p.tm_v, &p.ord_v, type, v, a.head_dim, 128))
    return cudaErrorInvalidValue;
  p.dk = g.dk, p.dv = g.dv;
  for (int i = 0; i < 3; ++i) p.dk_stride[i] = g.dk_stride[i], p.dv_stride[i] = g.dv_stride[i];
  p.lse_log2 = lse_log2, p.dsum = dsum, p.dq_accum = dq_accum;
  p.seqlen_q = int(a.seqlen_q), p.seqlen_k = int(a.seqlen_k), p.seqlen_q_pad = int(plan.seqlen_q_pad);
  p.heads_q = int(a.heads_q), p.heads_kv = int(a.heads_kv), p.group = int(a.heads_q / a.heads_kv);
  p.num_m_blocks = int(plan.seqlen_q_pad / plan.block_m);
  p.causal = a.causal;
  p.scale = scale, p.scale_log2 = scale * kLog2e;
  const dim3 grid(unsigned((a.seqlen_k + 127) / 128), unsigned(a.batch * a.heads_kv));
  e = a.head_dim == 64 ? launch_bwd_d64(bf16, p, grid, stream) : launch_bwd_d128(bf16, p, grid, stream);
  if (e != cudaSuccess) return e;

  ConvertArgs conv{dq_accum, g.dq, {}, int(a.batch), int(a.heads_q), int(a.seqlen_q), p.num_m_blocks, plan.block_m,
                   int(a.head_dim), scale};
  for (int i = 0; i < 3; ++i) conv.dq_stride[i] = g.dq_stride[i];
  const int64_t pairs = a.batch * a.heads_q * a.seqlen_q * a.head_dim / 2;
  const unsigned conv_blocks = unsigned(std::min<int64_t>((pairs + 255) / 256, 65535));
  if (bf16)
    convert_dq_kernel<__nv_bfloat16><<<conv_blocks, 256, 0, stream>>>(conv);
  else
    convert_dq_kernel<__half><<<conv_blocks, 256, 0, stream>>>(conv);
  return cudaGetLastError();
}

}  // namespace flashbox::sm90::bwd
