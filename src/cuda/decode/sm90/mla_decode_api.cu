// plan_kvcache_mla: the Hopper MLA decode kernel's plan for a validated KV-cache call. It declines
// (with mla_tile_policy.hpp's reason) what the kernel does not take; otherwise it fixes the launch
// (MlaParams, the split count: the caller's num_splits or mla_choose_splits) and its run launches
//   mla_decode_sm90_kernel -> combine (when splits > 1, over a DeviceScratch workspace)
// on the caller's stream. Built only with sm_90a (this folder); src/api/kvcache_api.cpp asks it
// before the explicit forward.
#include <cuda_runtime.h>

#include <string>
#include <utility>

#include "core/call_state.hpp"
#include "core/error.hpp"
#include "core/kvcache_backends.hpp"
#include "core/softmax_scale.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/device_scratch.hpp"
#include "cuda/decode/decode_params.hpp"
#include "cuda/decode/sm90/mla_decode_instances.hpp"
#include "cuda/decode/sm90/mla_tile_policy.hpp"

namespace flashbox::detail {
namespace {

using sm90::mla::MlaParams;

MlaParams make_mla_params(const KvcacheProblem &pr, int splits) {
  const flashbox_kvcache_args &a = *pr.args;
  MlaParams x{};
  x.q = a.q, x.qv = a.qv;
  for (int i = 0; i < 3; ++i) {
    x.q_stride[i] = a.q_stride[i], x.qv_stride[i] = a.qv ? a.qv_stride[i] : 0;
    x.o_stride[i] = a.o_stride[i];
  }
  x.k_cache = a.k_cache, x.v_cache = a.v_cache;
  for (int i = 0; i < 2; ++i) x.k_stride[i] = a.k_cache_stride[i], x.v_stride[i] = a.v_cache_stride[i];
  x.o = a.o, x.lse = a.lse;
  x.cache_seqlens = a.cache_seqlens, x.block_table = a.block_table, x.cache_batch_idx = a.cache_batch_idx;
  x.block_table_stride = a.block_table_stride;
  x.page_size = a.cache_rows, x.cache_entries = a.cache_entries, x.capacity = pr.capacity;
  x.batch = int(a.batch), x.seqlen_q = int(a.seqlen_q), x.heads_q = int(a.heads_q);
  x.rows = int(a.seqlen_q * a.heads_q);
  x.row_tiles = (x.rows + sm90::mla::kTileRows - 1) / sm90::mla::kTileRows;
  x.num_splits = splits;
  x.a_panels = a.qv ? 1 : 9;  // q / k_cache hold 64 columns with qv, all 576 without
  x.v_panel = a.qv ? 1 : 0;
  x.causal = a.causal;
  x.scale = pr.scale, x.scale_log2 = float(double(pr.scale) * kLog2eDouble);
  return x;
}

// The decode family's combine reads these fields only.
cuda::DecodeParams combine_params(const MlaParams &x) {
  cuda::DecodeParams d{};
  d.o = x.o, d.lse = x.lse, d.o_partial = x.o_partial, d.lse_partial = x.lse_partial;
  for (int i = 0; i < 3; ++i) d.o_stride[i] = x.o_stride[i];
  d.batch = x.batch, d.seqlen_q = x.seqlen_q, d.heads_q = x.heads_q, d.heads_kv = 1, d.group = x.heads_q;
  d.head_dim = int(sm90::mla::kVDim), d.num_splits = x.num_splits;
  d.learnable_sink = nullptr;
  return d;
}

}  // namespace

PlanResult plan_kvcache_mla(const KvcacheProblem &pr, int *splits_out) {
  const flashbox_kvcache_args &a = *pr.args;
  int dev = 0, major = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev)) {
    cuda::clear_cuda_error();
    return PlanResult::no("the device's compute capability could not be read");
  }
  std::string why = sm90::mla::mla_decline(a, major);
  if (!why.empty()) return PlanResult::no(std::move(why));
  const int64_t row_tiles = (a.seqlen_q * a.heads_q + sm90::mla::kTileRows - 1) / sm90::mla::kTileRows;
  const int splits =
      a.num_splits > 0 ? a.num_splits : sm90::mla::mla_choose_splits(a.batch * row_tiles, pr.max_total_keys, sms);
  if (splits_out) *splits_out = splits;
  MlaParams x = make_mla_params(pr, splits);
  const bool bf16 = a.dtype == FLASHBOX_BFLOAT16;
  const int64_t rows_total = a.batch * a.heads_q * a.seqlen_q;
  const int64_t o_bytes = splits > 1 ? int64_t(splits) * rows_total * sm90::mla::kVDim * 4 : 0;
  const int64_t bytes = splits > 1 ? o_bytes + int64_t(splits) * rows_total * 4 : 0;
  Plan plan;
  plan.kernel = std::string("cuda_mla_decode_sm90_") + (bf16 ? "bf16" : "fp16") + "_splits" + std::to_string(splits);
  plan.workspace_bytes = bytes;
  const auto stream = static_cast<cudaStream_t>(a.stream);
  plan.run = [x, bf16, stream, o_bytes, bytes, name = plan.kernel]() mutable -> int {
    cuda::DeviceScratch scratch(stream);
    if (bytes > 0) {
      const cudaError_t e = scratch.allocate(bytes);
      if (e == cudaErrorMemoryAllocation)
        return fail(FLASHBOX_ERR_OUT_OF_MEMORY, "the MLA split workspace (" + std::to_string(bytes) + " bytes for " +
                                                    std::to_string(x.num_splits) +
                                                    " splits) does not fit on the device");
      FLASHBOX_CUDA_TRY(e);
      x.o_partial = scratch.as<float>();
      x.lse_partial = x.o_partial + o_bytes / 4;
    }
    namespace mla = sm90::mla;
    FLASHBOX_CUDA_TRY(bf16 ? mla::launch_mla_decode<__nv_bfloat16>(x, stream)
                           : mla::launch_mla_decode<__half>(x, stream));
    if (x.num_splits > 1) {
      const cuda::DecodeParams d = combine_params(x);
      FLASHBOX_CUDA_TRY(bf16 ? mla::launch_mla_combine<__nv_bfloat16>(d, stream)
                             : mla::launch_mla_combine<__half>(d, stream));
    }
    set_kernel_name(name);
    return FLASHBOX_OK;
  };
  return {std::move(plan)};
}

}  // namespace flashbox::detail
