// Host side of the Hopper fp8 forward (flash_fwd_sm90_fp8_kernel.cuh): the plan for one problem, the
// V^T pre-pass into scratch memory and the launch.
//
// What it takes: dtype e4m3 q, k, v (one byte per element), o in bf16 or fp16 (Problem::out_dtype),
// fixed-length batches, head_dim = head_dim_v a multiple of 16 up to 256 (the TMA needs 16-byte
// strides: 16 e4m3 values), causal or not, GQA/MQA, seqlen_q != seqlen_k, descales per (batch, kv
// head) with any strides (0 broadcasts), LSE. It declines, with the reason, windows, softcap, ALiBi,
// sinks, variable-length batches and the mask families: an fp8 call that asks for one fails with
// FLASHBOX_ERR_UNSUPPORTED_IMPL on cuda (the cpu levels take them).
// Instantiations (the kernel table, scripts/generate_kernels.py): Fp8Config<128, 128, 2> serves head
// dims 16..128, Fp8Config<256, 128, 2> 144..256; the causal mask is a run-time flag. Tile 128 x 128
// (two consumer warpgroups of 64 rows). Schedule: the bf16 forward's policy and order (tile_policy.hpp:
// persistent_schedule, persistent_ctas, l2_section_heads, in e4m3's bytes of K/V per head): a
// persistent grid of one CTA per SM (a CTA takes a whole SM's registers: 128 x 24 + 256 x 240) walking
// the tiles in a snake over rounds of the longest-first order, or one CTA per tile for causal calls
// whose K/V per head exceed 4 MB (D256 above T = 8192), as the bf16 forward measured best.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include <cuda.h>
#include <cuda_runtime.h>

#include "core/backends.hpp"
#include "core/error.hpp"
#include "cuda/common/device_scratch.hpp"
#include "cuda/forward/sm90/flash_fwd_sm90_fp8_instances.hpp"
#include "cuda/forward/sm90/flash_fwd_sm90_fp8_launch.hpp"
#include "cuda/forward/sm90/flash_fwd_sm90_fp8_vt.hpp"
#include "cuda/forward/sm90/tile_policy.hpp"
#include "cuda/hopper/tma_host.hpp"


namespace flashbox::detail {
namespace {

using sm90::fp8::Fp8Config;
using sm90::fp8::FwdFp8Params;
using sm90::fp8::TransposeVArgs;

// The instantiations of the kernel table (flash_fwd_sm90_fp8_instances.hpp).
using Fp8D128 = Fp8Config<128, 128, 2>;
using Fp8D256 = Fp8Config<256, 128, 2>;
constexpr int kBlockN = 128;  // both configurations' key block: V^T's keys are padded to it

}  // namespace

PlanResult plan_sm90_fp8_forward(const Problem &a) {
  if (a.dtype != FLASHBOX_FLOAT8_E4M3) return PlanResult::no("the sm90 fp8 forward takes e4m3 inputs only");
  if (a.head_dim_v != a.head_dim)
    return PlanResult::no("the sm90 fp8 forward has no head_dim_v != head_dim (got " + std::to_string(a.head_dim) +
                          " / " + std::to_string(a.head_dim_v) + ")");
  if (a.head_dim % 16 != 0 || a.head_dim > 256)
    return PlanResult::no("the sm90 fp8 forward takes head_dims that are multiples of 16 up to 256 (got " +
                          std::to_string(a.head_dim) + ")");
  if (a.varlen()) return PlanResult::no("the sm90 fp8 forward has no variable-length batches yet");
  const core::ScoreMods &m = a.mods;
  // Causal is window_right = 0 with no left edge (core/masks.hpp); any other edge is a window.
  if (m.window_left >= 0 || m.window_right > 0) return PlanResult::no("the sm90 fp8 forward has no sliding window yet (causal only)");
  if (m.softcap > 0.f || m.alibi_slopes != nullptr)
    return PlanResult::no("the sm90 fp8 forward has no softcap or ALiBi yet");
  if (m.sinks != nullptr) return PlanResult::no("the sm90 fp8 forward has no learnable sinks yet");
  if (const std::string what = mask_family_in_use(a); !what.empty())
    return PlanResult::no("the sm90 fp8 forward has no " + what);
  if (a.out_dtype != FLASHBOX_BFLOAT16 && a.out_dtype != FLASHBOX_FLOAT16)
    return PlanResult::no("the sm90 fp8 forward writes o in bf16 or fp16");
  if (a.seqlen_q > INT32_MAX / 2 || a.seqlen_k > INT32_MAX / 2)
    return PlanResult::no("sequence too long for 32-bit TMA coordinates");
  if (const char *reason = sm90::sm90_unavailable_reason()) return PlanResult::no(reason);
  const int d = a.head_dim <= 128 ? 128 : 256;
  const int64_t m_blocks = (a.seqlen_q + 127) / 128;
  const int64_t tiles = a.batch * a.heads_q * m_blocks;
  if (tiles > INT32_MAX || a.batch * a.heads_kv > 65535)
    return PlanResult::no("more query tiles or (batch, kv head) pairs than one launch takes");

  const sm90::TensorView q = sm90::attention_view(a.q, a.seqlen_q, a.heads_q, a.batch, a.q_stride, false);
  const sm90::TensorView k = sm90::attention_view(a.k, a.seqlen_k, a.heads_kv, a.batch, a.k_stride, false);
  if (!sm90::tma_describable(q, 1) || !sm90::tma_describable(k, 1))
    return PlanResult::no("TMA needs 16-byte aligned q/k and batch/seq/head strides that are multiples of 16 bytes");
  // O is stored from registers in 4-byte pairs: its base and strides must keep them aligned.
  if (reinterpret_cast<uintptr_t>(a.o) % 4 != 0 || a.o_stride[0] % 2 != 0 || a.o_stride[1] % 2 != 0 ||
      a.o_stride[2] % 2 != 0)
    return PlanResult::no("the sm90 fp8 forward needs a 4-byte aligned o with even strides");
  if (reinterpret_cast<uintptr_t>(a.v) % 4 != 0 || a.v_stride[0] % 4 != 0 || a.v_stride[1] % 4 != 0 ||
      a.v_stride[2] % 4 != 0)
    return PlanResult::no("the sm90 fp8 forward's V^T pre-pass needs a 4-byte aligned v with strides that are "
                          "multiples of 4");

  FwdFp8Params p;
  std::memset(&p, 0, sizeof p);
  if (!sm90::encode_map(&p.tm_q, &p.ord_q, CU_TENSOR_MAP_DATA_TYPE_UINT8, q, a.head_dim, 128, 128, 1) ||
      !sm90::encode_map(&p.tm_k, &p.ord_k, CU_TENSOR_MAP_DATA_TYPE_UINT8, k, a.head_dim, kBlockN, 128, 1))
    return PlanResult::no("cuTensorMapEncodeTiled rejected the layout of q/k");
  p.seqlen_q = int(a.seqlen_q), p.seqlen_k = int(a.seqlen_k);
  p.heads_q = int(a.heads_q), p.heads_kv = int(a.heads_kv), p.group = int(a.group), p.batch = int(a.batch);
  p.num_m_blocks = int(m_blocks), p.num_tiles = int(tiles);
  p.section_heads = 1;  // one tile per CTA: the plain order (head by head, longest first)
  p.causal = m.window_right == 0;
  p.scale = a.scale;
  p.q_descale = a.q_descale, p.k_descale = a.k_descale, p.v_descale = a.v_descale;
  for (int i = 0; i < 2; ++i) {
    p.qd_stride[i] = a.q_descale_stride[i], p.kd_stride[i] = a.k_descale_stride[i];
    p.vd_stride[i] = a.v_descale_stride[i];
  }
  p.o = a.o;
  p.o_batch = a.o_stride[0], p.o_seq = a.o_stride[1], p.o_head = a.o_stride[2];
  p.head_dim = int(a.head_dim);
  p.o_bf16 = a.out_dtype == FLASHBOX_BFLOAT16;
  p.lse = a.lse;

  // V^T scratch: [batch, heads_kv, head_dim, keys_pad], keys padded to the key block (zeros).
  const int64_t keys_pad = (a.seqlen_k + kBlockN - 1) / kBlockN * kBlockN;
  const int64_t vt_bytes = a.batch * a.heads_kv * a.head_dim * keys_pad;
  TransposeVArgs tv{static_cast<const uint8_t *>(a.v), a.v_stride[0], a.v_stride[1], a.v_stride[2], nullptr,
                    int(a.seqlen_k), int(keys_pad), int(a.head_dim), int(a.heads_kv), int(a.batch * a.heads_kv)};
  dim3 grid = dim3(unsigned(tiles));
  const bool persistent = sm90::persistent_schedule(a);
  if (persistent) {
    grid.x = sm90::persistent_grid(a, p.num_tiles);
    p.section_heads = sm90::l2_section_heads(a);
  }
  const cudaStream_t stream = static_cast<cudaStream_t>(a.stream);
  const uint64_t vt_dims[4] = {uint64_t(keys_pad), uint64_t(a.head_dim), uint64_t(a.heads_kv), uint64_t(a.batch)};
  const uint64_t vt_strides[3] = {uint64_t(keys_pad), uint64_t(keys_pad * a.head_dim),
                                  uint64_t(keys_pad * a.head_dim * a.heads_kv)};
  const uint32_t vt_box[4] = {uint32_t(kBlockN), uint32_t(d), 1, 1};

  std::string name = "cuda_flash_sm90_fp8_d" + std::to_string(d) + "_128x128";
  if (p.causal) name += "_causal";
  if (persistent) name += "_persistent";
  return {Plan{std::move(name), vt_bytes,
               [p, tv, grid, d, stream, vt_bytes, vt_dims, vt_strides, vt_box]() mutable -> int {
                 cuda::DeviceScratch scratch(stream);
                 cudaError_t e = scratch.allocate(vt_bytes);
                 if (e == cudaErrorMemoryAllocation)
                   return fail(FLASHBOX_ERR_OUT_OF_MEMORY, "sm90 fp8 forward: cannot allocate " +
                                                               std::to_string(vt_bytes) + " bytes for V^T");
                 if (e != cudaSuccess)
                   return fail(FLASHBOX_ERR_CUDA, std::string("sm90 fp8 forward: ") + cudaGetErrorString(e));
                 tv.vt = scratch.as<uint8_t>();
                 if (!sm90::encode_map_4d(&p.tm_vt, CU_TENSOR_MAP_DATA_TYPE_UINT8, tv.vt, vt_dims, vt_strides, vt_box))
                   return fail(FLASHBOX_ERR_INTERNAL, "sm90 fp8 forward: cuTensorMapEncodeTiled rejected V^T's map");
                 e = sm90::fp8::launch_transpose_v(tv, stream);
                 if (e == cudaSuccess)
                   e = d == 128 ? sm90::fp8::launch_config<Fp8D128>(p, grid, stream)
                                : sm90::fp8::launch_config<Fp8D256>(p, grid, stream);
                 if (e != cudaSuccess) {
                   cudaGetLastError();
                   return fail(FLASHBOX_ERR_CUDA,
                               std::string("sm90 fp8 forward: launch failed: ") + cudaGetErrorString(e));
                 }
                 return FLASHBOX_OK;
               }}};
}

}  // namespace flashbox::detail
