// The sm80 backward family (FlashAttention-2 §3.2): its plan allocates the scratch (D = rowsum(dO ∘ O),
// and the fp32 dQ accumulator unless deterministic), then runs
//   rowsum -> dK/dV kernel (dQ by atomicAdd) -> convert dQ           (deterministic = 0)
//   rowsum -> dK/dV kernel -> dQ kernel (one owner per Q block)      (deterministic = 1)
// on the caller's stream; with a learnable sink, its gradient from the row sums right after rowsum
// (cuda/backward/sink_grad.hpp: the forward's LSE holds the sink, so nothing else changes).
// src/api/backward_api.cpp chooses between this family and the Hopper one (src/cuda/backward/sm90).
// Scratch is freed stream-ordered; the call does not synchronise.
// It takes the extension's window, softcap, ALiBi, learnable sinks, variable-length batches and mask
// families (attention_chunk, seqused, documents, prefix-LM, block masks of 128-multiple blocks), and
// every head_dim that is a multiple of 8 up to 256 (the d64, d128 and d256 instantiations with
// zero-filled columns).
#include <cuda_runtime.h>

#include <string>

#include "core/backends.hpp"
#include "core/error.hpp"
#include "cuda/backward/sink_grad.hpp"
#include "cuda/backward/sm80/flash_bwd_params.hpp"
#include "cuda/backward/sm80/tile_policy.hpp"
#include "cuda/common/device_scratch.hpp"
#include "cuda/common/mask_ext_plan.hpp"

namespace flashbox::detail {
namespace {

using cuda::bwd::BwdParams;

// Rows of lse / dsum / dq_accum: [batch, heads_q, seqlen_q], or [heads_q, total_q] when varlen.
int64_t scratch_rows(const Problem &a) { return (a.varlen() ? 1 : a.batch) * a.heads_q * a.seqlen_q; }
// The head_dim of the instantiation that serves a.head_dim (columns past the call's are zeros).
int kernel_head_dim(const Problem &a) { return a.head_dim <= 64 ? 64 : a.head_dim <= 128 ? 128 : 256; }
int64_t rowsum_bytes(const Problem &a) { return scratch_rows(a) * 4; }
int64_t dq_accum_bytes(const Problem &a) { return scratch_rows(a) * kernel_head_dim(a) * 4; }

std::string cuda_text(cudaError_t e, const char *what) {
  return std::string("cuda backward: ") + what + " failed: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
}

// sink: the sink gradient's arguments (sinks null: no sink) but for the row sums, filled here.
int run(const BwdParams &params, const cuda::bwd::SinkGradArgs &sink, bool bf16, bool det, int d, int block_q,
        int64_t workspace, cudaStream_t stream) {
  BwdParams p = params;
  cuda::DeviceScratch dsum(stream), dq_accum(stream);
  // The row-wise kernels (rowsum, convert) see a variable-length batch as one sequence of total_q.
  BwdParams flat = p;
  if (p.cu_seqlens_q) flat.batch = 1, flat.seqlen_q = p.total_q;
  const int64_t rows = int64_t(flat.batch) * p.heads_q * flat.seqlen_q;
  cudaError_t e = dsum.allocate(rows * 4);
  if (e == cudaSuccess && !det) e = dq_accum.allocate(rows * d * 4);
  if (e == cudaErrorMemoryAllocation)
    return fail(FLASHBOX_ERR_OUT_OF_MEMORY,
                "cuda backward: cannot allocate " + std::to_string(workspace) + " bytes of scratch");
  if (e != cudaSuccess) return fail(FLASHBOX_ERR_CUDA, cuda_text(e, "cudaMallocAsync"));
  p.dsum = dsum.as<float>();
  p.dq_accum = det ? nullptr : dq_accum.as<float>();
  flat.dsum = p.dsum, flat.dq_accum = p.dq_accum;

  if (rows > 0 && (e = cuda::bwd::launch_bwd_rowsum(flat, bf16, p.head_dim, stream)) != cudaSuccess)
    return fail(FLASHBOX_ERR_CUDA, cuda_text(e, "rowsum kernel launch"));
  if (sink.sinks) {  // every head's dsink, 0 for a batch without rows
    cuda::bwd::SinkGradArgs sg = sink;
    sg.lse = p.lse, sg.dsum = p.dsum;
    sg.batch = flat.batch, sg.heads_q = p.heads_q, sg.seqlen_q = flat.seqlen_q, sg.dsum_ld = flat.seqlen_q;
    if ((e = cuda::bwd::launch_sink_grad(sg, stream)) != cudaSuccess)
      return fail(FLASHBOX_ERR_CUDA, cuda_text(e, "sink gradient kernel launch"));
  }
  if (!det && rows > 0 && (e = cudaMemsetAsync(p.dq_accum, 0, size_t(rows * d * 4), stream)) != cudaSuccess)
    return fail(FLASHBOX_ERR_CUDA, cuda_text(e, "cudaMemsetAsync of the dQ accumulator"));
  e = d == 64    ? cuda::bwd::launch_flash_bwd<64>(p, bf16, det, block_q, stream)
      : d == 128 ? cuda::bwd::launch_flash_bwd<128>(p, bf16, det, block_q, stream)
                 : cuda::bwd::launch_flash_bwd<256>(p, bf16, det, block_q, stream);
  if (e != cudaSuccess) return fail(FLASHBOX_ERR_CUDA, cuda_text(e, "flash backward kernel launch"));
  if (!det && rows > 0 && (e = cuda::bwd::launch_bwd_convert_dq(flat, bf16, p.head_dim, stream)) != cudaSuccess)
    return fail(FLASHBOX_ERR_CUDA, cuda_text(e, "dQ convert kernel launch"));
  return FLASHBOX_OK;
}

}  // namespace

PlanResult plan_sm80_backward(const GradProblem &g) {
  const Problem &a = g.fwd;
  if (a.head_dim > 256 || a.head_dim % 8 != 0)
    return PlanResult::no("the sm80 backward takes head_dim up to 256 in multiples of 8 (got " +
                          std::to_string(a.head_dim) + ")");
  // Grids are (blocks of 32 to 128 rows, batch · heads, column halves): gridDim.y <= 65535 bounds batch · heads.
  if (a.seqlen_q > (int64_t(1) << 30) || a.seqlen_k > (int64_t(1) << 30) || a.batch * a.heads_q > 65535 ||
      a.max_seqlen_q > (int64_t(1) << 30) || a.max_seqlen_k > (int64_t(1) << 30))
    return PlanResult::no(
        "cuda flash backward: needs seqlen_q, seqlen_k <= 2^30 and batch * heads_q <= 65535 (got seqlen_q " +
            std::to_string(a.seqlen_q) + ", seqlen_k " + std::to_string(a.seqlen_k) + ", batch * heads_q " +
            std::to_string(a.batch * a.heads_q) + ")",
        FLASHBOX_ERR_INVALID_SIZE);
  if (const std::string why = cuda::mask_ext_refusal(a, "backward"); !why.empty()) return PlanResult::no(why);
  // dsink sums every row of lse and D (cuda/backward/sink_grad.hpp); rows past seqused_q hold no
  // forward output, so the two are not taken together.
  if (a.mods.sinks && a.seqused_q)
    return PlanResult::no("the sm80 backward has no learnable_sink together with seqused_q");
  const bool det = g.deterministic != 0;
  BwdParams p{};
  p.q = a.q, p.k = a.k, p.v = a.v, p.o = a.o, p.dout = g.dout;
  p.dq = g.dq, p.dk = g.dk, p.dv = g.dv, p.lse = a.lse;
  for (int i = 0; i < 3; ++i) {
    p.q_stride[i] = a.q_stride[i], p.k_stride[i] = a.k_stride[i], p.v_stride[i] = a.v_stride[i];
    p.o_stride[i] = a.o_stride[i], p.do_stride[i] = g.dout_stride[i];
    p.dq_stride[i] = g.dq_stride[i], p.dk_stride[i] = g.dk_stride[i], p.dv_stride[i] = g.dv_stride[i];
  }
  const bool varlen = a.varlen();
  p.batch = int(a.batch);
  p.seqlen_q = int(varlen ? a.max_seqlen_q : a.seqlen_q), p.seqlen_k = int(varlen ? a.max_seqlen_k : a.seqlen_k);
  p.heads_q = int(a.heads_q), p.heads_kv = int(a.heads_kv), p.group = int(a.group);
  p.head_dim = int(a.head_dim);
  p.accum_ld = kernel_head_dim(a);
  p.scale = a.scale;
  p.scale_log2 = a.scale_log2;
  p.causal = a.causal;
  p.mods = cuda::device_mods(a.mods);
  p.transforms = p.mods.capped() || p.mods.alibi();
  p.ext = cuda::device_mask_ext(a);
  if (varlen) {
    p.cu_seqlens_q = a.cu_seqlens_q, p.cu_seqlens_k = a.cu_seqlens_k;
    p.total_q = int(a.seqlen_q), p.total_k = int(a.seqlen_k);
  }

  const int d = kernel_head_dim(a);
  const int block_q = sm80::bwd_block_q(a, d);  // tile_policy.hpp
  const int64_t workspace = rowsum_bytes(a) + (det ? 0 : dq_accum_bytes(a));
  std::string name = "cuda_flash_bwd_sm80_d" + std::to_string(d) + (det ? "_deterministic" : "");
  const bool bf16 = a.dtype == FLASHBOX_BFLOAT16;
  const cudaStream_t stream = static_cast<cudaStream_t>(a.stream);
  cuda::bwd::SinkGradArgs sink{};
  sink.sinks = a.mods.sinks, sink.dsink = g.dsink;
  return {Plan{std::move(name), workspace, [p, sink, bf16, det, d, block_q, workspace, stream] {
                 return run(p, sink, bf16, det, d, block_q, workspace, stream);
               }}};
}

}  // namespace flashbox::detail
