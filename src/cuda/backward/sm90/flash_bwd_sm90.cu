// Host side of the Hopper backward family: its plan (when it applies, tensor maps, scratch sizes), and
// the two memory-bound kernels around the main one:
//   prepare:    per (batch, query head, padded row): D = rowsum(dO ∘ O) and LSE · log2 e; padding
//               rows (>= seqlen_q, up to a whole query tile) get D = 0 and LSE = +inf, so P = 0.
//               It also zeroes the row's share of the dQ accumulator (head_dim floats of the flat
//               buffer) and of the deterministic mode's semaphores (one int per row while any are
//               left): no separate memset launch.
//   convert_dq: dq = scale · dq_accum, read in the main kernel's fragment order (see
//               flash_bwd_sm90_kernel.cuh), written in the dtype through the caller's strides.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "core/backends.hpp"
#include "core/error.hpp"
#include "core/softmax_scale.hpp"
#include "cuda/backward/sm80/bwd_device.cuh"
#include "cuda/backward/sm90/flash_bwd_sm90_kernel.cuh"
#include "cuda/backward/sm90/flash_bwd_sm90_launch.hpp"
#include "cuda/common/device_scratch.hpp"
#include "cuda/hopper/tma_host.hpp"

namespace flashbox::sm90::bwd {
namespace {

struct PrepArgs {
  const void *o, *dout;
  const float *lse;
  int64_t o_stride[3], do_stride[3];
  float *lse_log2, *dsum;
  float *dq_accum;  // zeroed: rows * head_dim floats
  int *dq_sem;      // zeroed: n_sem ints (deterministic mode), else null
  int64_t n_sem;
  int batch, heads_q, seqlen_q, seqlen_q_pad, head_dim;
};

// One warp per padded row.
template <typename Elem>
__global__ void prepare_kernel(const PrepArgs a) {
  const int64_t rows = int64_t(a.batch) * a.heads_q * a.seqlen_q_pad;
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  if (4 * lane < a.head_dim)  // head_dim is 64 or 128: one float4 per lane of the first head_dim / 4
    reinterpret_cast<float4 *>(a.dq_accum + row * a.head_dim)[lane] = make_float4(0.f, 0.f, 0.f, 0.f);
  if (lane == 31 && row < a.n_sem) a.dq_sem[row] = 0;
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

// (batch, kv head) pairs per chunk of the CTA order (flash_bwd_sm90_kernel.cuh, tile_of): enough for
// two CTAs per SM in a chunk, so that the longest-first order inside it leaves no SM idle at the end
// (1 = the plain head-by-head order, where one head alone has that many key blocks); at most 24 MB of
// the chunk's dQ accumulators, which the adds keep in L2; then equal chunks (a short last chunk would
// start its long CTAs late).
int chunk_heads_for(int64_t num_bh, int64_t num_n_blocks, int64_t seqlen_q_pad, int64_t head_dim) {
  int sms = 0, dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
    cudaGetLastError();
    sms = 132;
  }
  int64_t g = (2 * sms + num_n_blocks - 1) / num_n_blocks;
  if (g <= 3) return 1;
  g = std::min<int64_t>(g, std::max<int64_t>(1, (int64_t(24) << 20) / (seqlen_q_pad * head_dim * 4)));
  g = std::clamp<int64_t>(g, 1, num_bh);
  const int64_t chunks = (num_bh + g - 1) / g;
  return int((num_bh + chunks - 1) / chunks);
}

struct Launch {
  BwdSm90Params p;  // tensor maps and sizes; the scratch pointers are set by the run
  PrepArgs prep;
  ConvertArgs conv;
  int64_t vec_bytes, dq_accum_bytes, sem_bytes, rows, pairs;
  dim3 grid;
  bool bf16, d64;
  cudaStream_t stream;
};

std::string cuda_text(cudaError_t e, const char *what) {
  return std::string("sm90 backward: ") + what + " failed: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
}

int run(const Launch &l) {
  using detail::fail;
  const cudaStream_t stream = l.stream;
  cuda::DeviceScratch lse_log2(stream), dsum(stream), dq_accum(stream);
  cudaError_t e = lse_log2.allocate(l.vec_bytes);
  if (e == cudaSuccess) e = dsum.allocate(l.vec_bytes);
  if (e == cudaSuccess) e = dq_accum.allocate(l.dq_accum_bytes + l.sem_bytes);  // semaphores behind the floats
  if (e == cudaErrorMemoryAllocation)
    return fail(FLASHBOX_ERR_OUT_OF_MEMORY, "cuda backward: cannot allocate " +
                                                std::to_string(2 * l.vec_bytes + l.dq_accum_bytes + l.sem_bytes) +
                                                " bytes of scratch");
  if (e != cudaSuccess) return fail(FLASHBOX_ERR_CUDA, cuda_text(e, "cudaMallocAsync"));

  PrepArgs prep = l.prep;
  prep.lse_log2 = lse_log2.as<float>(), prep.dsum = dsum.as<float>();
  prep.dq_accum = dq_accum.as<float>();
  prep.dq_sem = l.sem_bytes > 0 ? reinterpret_cast<int *>(dq_accum.as<uint8_t>() + l.dq_accum_bytes) : nullptr;
  prep.n_sem = l.sem_bytes / 4;
  const unsigned prep_blocks = unsigned((l.rows + 7) / 8);
  if (l.bf16)
    prepare_kernel<__nv_bfloat16><<<prep_blocks, 256, 0, stream>>>(prep);
  else
    prepare_kernel<__half><<<prep_blocks, 256, 0, stream>>>(prep);
  if ((e = cudaGetLastError()) != cudaSuccess) return fail(FLASHBOX_ERR_CUDA, cuda_text(e, "prepare kernel launch"));

  BwdSm90Params p = l.p;
  p.lse_log2 = lse_log2.as<float>(), p.dsum = dsum.as<float>(), p.dq_accum = dq_accum.as<float>();
  p.dq_sem = prep.dq_sem;
  e = l.d64 ? launch_bwd_d64(l.bf16, p, l.grid, stream) : launch_bwd_d128(l.bf16, p, l.grid, stream);
  if (e != cudaSuccess) return fail(FLASHBOX_ERR_CUDA, cuda_text(e, "main kernel launch"));

  ConvertArgs conv = l.conv;
  conv.dq_accum = dq_accum.as<float>();
  const unsigned conv_blocks = unsigned(std::min<int64_t>((l.pairs + 255) / 256, 65535));
  if (l.bf16)
    convert_dq_kernel<__nv_bfloat16><<<conv_blocks, 256, 0, stream>>>(conv);
  else
    convert_dq_kernel<__half><<<conv_blocks, 256, 0, stream>>>(conv);
  if ((e = cudaGetLastError()) != cudaSuccess) return fail(FLASHBOX_ERR_CUDA, cuda_text(e, "dQ convert kernel launch"));
  return FLASHBOX_OK;
}

}  // namespace
}  // namespace flashbox::sm90::bwd

namespace flashbox::detail {

// Declines (the caller falls back to the sm80 family) where this path does not apply: not an sm_90
// device, a layout the TMA cannot describe, a grid too large. Deterministic mode orders the dQ adds
// with semaphores behind the dQ accumulator (flash_bwd_sm90_kernel.cuh).
PlanResult plan_sm90_backward(const GradProblem &g, bool size_only) {
  using namespace sm90::bwd;
  using sm90::TensorView;
  const Problem &a = g.fwd;
  if (a.head_dim != 64 && a.head_dim != 128) return PlanResult::no("the sm90 backward takes head_dim 64 or 128");
  if (const char *reason = sm90::sm90_unavailable_reason()) return PlanResult::no(reason);
  if (a.seqlen_q > INT32_MAX / 2 || a.seqlen_k > INT32_MAX / 2)
    return PlanResult::no("sequence too long for 32-bit coordinates");
  const TensorView q{a.q, a.seqlen_q, a.heads_q, a.batch, a.q_stride};
  const TensorView k{a.k, a.seqlen_k, a.heads_kv, a.batch, a.k_stride};
  const TensorView v{a.v, a.seqlen_k, a.heads_kv, a.batch, a.v_stride};
  const TensorView dout{g.dout, a.seqlen_q, a.heads_q, a.batch, g.dout_stride};
  if (!size_only)
    for (const TensorView &t : {q, k, v, dout})
      if (!sm90::tma_describable(t))
        return PlanResult::no("TMA needs 16-byte aligned q/k/v/dout and strides that are multiples of 16 B");
  const int bm = block_m_for(a.head_dim);
  const int64_t m_blocks = (a.seqlen_q + bm - 1) / bm;
  const int64_t n_blocks = (a.seqlen_k + 127) / 128;
  if (n_blocks * a.batch * a.heads_kv > INT32_MAX) return PlanResult::no("grid too large");

  Launch l{};
  const int64_t seqlen_q_pad = m_blocks * bm;
  l.vec_bytes = a.batch * a.heads_q * seqlen_q_pad * 4;
  l.dq_accum_bytes = l.vec_bytes * a.head_dim;
  // Deterministic mode: one int per (batch, query head, query block, consumer warpgroup).
  l.sem_bytes = g.deterministic ? a.batch * a.heads_q * m_blocks * kConsumerWarpgroups * 4 : 0;
  Plan plan{"cuda_flash_bwd_sm90_d" + std::to_string(a.head_dim) + (g.deterministic ? "_deterministic" : ""),
            2 * l.vec_bytes + l.dq_accum_bytes + l.sem_bytes,
            {}};
  if (size_only) return {std::move(plan)};

  l.bf16 = a.dtype == FLASHBOX_BFLOAT16, l.d64 = a.head_dim == 64;
  l.stream = static_cast<cudaStream_t>(a.stream);
  std::memset(&l.p, 0, sizeof l.p);
  BwdSm90Params &p = l.p;
  const CUtensorMapDataType type = l.bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  if (!sm90::encode_map(&p.tm_q, &p.ord_q, type, q, a.head_dim, bm) ||
      !sm90::encode_map(&p.tm_do, &p.ord_do, type, dout, a.head_dim, bm) ||
      !sm90::encode_map(&p.tm_k, &p.ord_k, type, k, a.head_dim, 128) ||
      !sm90::encode_map(&p.tm_v, &p.ord_v, type, v, a.head_dim, 128))
    return PlanResult::no("cuTensorMapEncodeTiled rejected the layout of q/k/v/dout");
  p.dk = g.dk, p.dv = g.dv;
  for (int i = 0; i < 3; ++i) p.dk_stride[i] = g.dk_stride[i], p.dv_stride[i] = g.dv_stride[i];
  p.seqlen_q = int(a.seqlen_q), p.seqlen_k = int(a.seqlen_k), p.seqlen_q_pad = int(seqlen_q_pad);
  p.heads_q = int(a.heads_q), p.heads_kv = int(a.heads_kv), p.group = int(a.group);
  p.num_m_blocks = int(m_blocks);
  p.num_n_blocks = int(n_blocks), p.num_bh = int(a.batch * a.heads_kv);
  p.chunk_heads = chunk_heads_for(p.num_bh, n_blocks, seqlen_q_pad, a.head_dim);
  p.causal = a.causal;
  p.scale = a.scale, p.scale_log2 = a.scale_log2;
  l.grid = dim3(unsigned(n_blocks * a.batch * a.heads_kv));

  l.prep = PrepArgs{a.o,
                    g.dout,
                    a.lse,
                    {},
                    {},
                    nullptr,
                    nullptr,
                    nullptr,
                    nullptr,
                    0,
                    int(a.batch),
                    int(a.heads_q),
                    int(a.seqlen_q),
                    int(seqlen_q_pad),
                    int(a.head_dim)};
  for (int i = 0; i < 3; ++i) l.prep.o_stride[i] = a.o_stride[i], l.prep.do_stride[i] = g.dout_stride[i];
  l.rows = a.batch * a.heads_q * seqlen_q_pad;
  l.conv = ConvertArgs{nullptr,         g.dq,           {}, int(a.batch),    int(a.heads_q),
                       int(a.seqlen_q), p.num_m_blocks, bm, int(a.head_dim), a.scale};
  for (int i = 0; i < 3; ++i) l.conv.dq_stride[i] = g.dq_stride[i];
  l.pairs = a.batch * a.heads_q * a.seqlen_q * a.head_dim / 2;
  plan.run = [l] { return run(l); };
  return {std::move(plan)};
}

}  // namespace flashbox::detail
