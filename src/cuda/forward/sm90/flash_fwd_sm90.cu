// Host side of the Hopper forward: the plan for one problem (tile, schedule, tensor maps, grid) and
// its launch.
//
// q, k, v and o are described to the TMA as 4-D tensors {head_dim, and the seq, head and batch
// dimensions ordered by stride}, so BTHD, BHTD and strided slices all work as long as the base is
// 16-byte aligned and every stride that matters is a multiple of 16 bytes; otherwise the plan says
// why and src/api falls back to the sm80 family. The tensor maps are encoded once, here, and travel
// to the kernel in its __grid_constant__ parameters. cuTensorMapEncodeTiled comes from the driver
// through the runtime's entry-point query, so nothing links libcuda. The tile and schedule policy is
// tile_policy.hpp.
//
// What it takes: fixed-length and variable-length batches, every head_dim that is a multiple of 8 up
// to 256 on the head_dim 64, 96, 128, 192 and 256 instantiations (kernel_head_dim, tile_policy.hpp:
// the next one up; 136..192 on the 256 kernel too with the tile 128x64, and 72..96 on the 128 kernel
// with 128x176, for benchmarks), causal, sliding windows (any tile), softcap and ALiBi (the default
// tile of the 64 and 128 instantiations: the MODS configuration; 72..96 with them run the 128 one,
// serving_head_dim), learnable sinks (every configuration: the epilogue folds the sink into the
// row's max and sum, flash_fwd_sm90_kernel.cuh). The 96 kernel's V map has 32-column boxes with 64B
// swizzle (its V tile is three 32-column panels: flash_fwd_sm90_kernel.cuh); every other map has
// 64-column boxes, 128B swizzle.
// A head_dim below its instantiation's (e.g. 112 on the 128 kernel) is served by the TMA's bounds: the
// maps' innermost dimension is the call's head_dim, so a 64-column box reaching past it loads zeros
// there and a store clips it. PTX ISA §5.5.3.3 "Out of Boundary Access": "Elements in the Bounding
// Box which fall outside of the tensor boundary are set to 0" (zero fill mode: oobFill NONE); the
// driver's cuTensorMapEncodeTiled (cuda.h) bounds boxDim by 256, not by globalDim, so a 64-column box
// over an 8-column head_dim is a legal map. The box's mbarrier transaction count stays the whole box
// (not quoted from NVIDIA's text: every sm90 kernel here relies on it for boxes whose rows pass the
// end of a tensor, docs/hopper.md §3.2; a box wholly past head_dim, panel 3 of the 256 kernel for
// head_dims up to 192 (tile 128x64), relies on it too and is checked by tests/sm90's HeadDims tests; on the
// 192 kernel every panel holds some of a 136..192 call's columns), so no count changes. Q K^T over
// zero columns adds exact zeros, P V's extra columns of O are never stored, and the softmax scale is
// the call's (Problem::scale, 1/sqrt(head_dim) by default), never the instantiation's. The one store
// that bypasses the TMA, a varlen sequence's last partial 64-row slice, copies only the call's
// head_dim columns (FwdParams::head_dim). The strides the maps need (multiples of 16 bytes) hold for
// any multiple of 8 (validate.cpp takes CUDA head_dims that are multiples of 8 up to 256 and needs
// head_dim contiguous); tma_describable still checks every call. The kernel name says which
// instantiation runs (cuda_flash_sm90_d96_... for a head_dim 80 call, cuda_flash_sm90_d192_128x112_...
// for 160).
// head_dim_v != head_dim: only the pairs of tile_policy.hpp's kDvKernels ((192, 128): head dims
// 136..192 with head_dim_v up to 128, fixed length, no softcap or ALiBi); the V and O maps end at
// head_dim_v as Q's and K's end at head_dim, and the kernel name says `_dv128`. src/api runs every
// other pair on column slices of V (src/api/head_dim_v_split.hpp), and so every declined call.
// Variable-length batches (cu_seqlens) run on the same instantiations (run-time fields): the maps
// describe the packed [total, heads, head_dim] tensors as one batch entry, a tile's rows start at its
// sequence's first token, and the tiles are scheduled per sequence from a list the device builds
// (flash_fwd_sm90_varlen.cu) in the call's scratch memory, always on the persistent grid. A box that
// reaches past a sequence's end reads the next sequence's rows: as keys they are masked (the mask
// ends at the sequence's own seqlen_k), as queries their results are never stored (a slice that
// ends inside the sequence's last tile is stored from registers, row by row, not by the TMA).
// Totals of 0 tokens are declined (a tensor map cannot have an empty dimension; validation refuses
// them before any family), and head_dims above 128 (the 256 instantiation) are left to the sm80
// family (the kernel's varlen store path is not compiled there, neither at 192 nor at 256:
// FwdConfig::VARLEN).
// The extension's mask families (document ids, prefix-LM, attention_chunk, seqused_q/k, block masks,
// mask mods; docs/masks.md) run on the MaskExtConfig kernels (mask_walk.cuh): bf16, head dims up to
// 128 (64 and 128 instantiations, 128 x 128 tiles), fixed length and varlen (block masks, and so mask
// mods, fixed length only, as everywhere), no softcap or ALiBi, block masks of 128-multiple blocks; any
// other such call is declined with the reason and runs on the sm80 family. A mask mod is the block
// mask src/api/mask_mod_tiles.hpp attached plus its bit tiles (FwdParams::ext.mod_bits, read at run
// time by the same kernels: a partial tile ANDs them into the element rule). With document ids a
// small kernel writes each query block's doc span into the call's scratch first
// (flash_fwd_sm90_doc_spans.cu; after the varlen tile list).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include <cuda.h>
#include <cuda_runtime.h>

#include "core/backends.hpp"
#include "core/error.hpp"
#include "cuda/common/device_scratch.hpp"
#include "cuda/common/mask_ext_plan.hpp"
#include "cuda/common/score_mods.cuh"
#include "cuda/forward/sm90/flash_fwd_sm90_launch.hpp"
#include "cuda/forward/sm90/tile_policy.hpp"
#include "cuda/hopper/tma_host.hpp"

namespace flashbox::sm90 {

unsigned persistent_grid(const detail::Problem &a, int num_tiles) {
  int dev = 0, sms = 0;
  if (a.tuning.overrides.sm90_max_ctas <= 0 &&
      (cudaGetDevice(&dev) != cudaSuccess ||
       cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)) {
    cudaGetLastError();
    sms = 0;
  }
  return unsigned(persistent_ctas(a, sms, num_tiles));
}

}  // namespace flashbox::sm90

namespace flashbox::detail {
namespace {

using sm90::encode_map;
using sm90::FwdParams;
using sm90::TensorView;
using sm90::TileChoice;
using sm90::tma_describable;

std::string tile_list(int64_t head_dim) {
  std::string s;
  for (const TileChoice t : sm90::tiles_of(head_dim))
    s += (s.empty() ? "" : ", ") + std::to_string(t.bm) + "x" + std::to_string(t.bn);
  return s;
}

// The problem's mods for the kernel: a window side at least as long as both sequences is unbounded
// (no row reaches past it), which also keeps the kernel's int arithmetic on it from overflowing.
cuda::DeviceMods kernel_mods(const Problem &a) {
  cuda::DeviceMods m = cuda::device_mods(a.mods);
  const int64_t reach = std::max(a.seqlen_q, a.seqlen_k);
  if (a.mods.window_left >= reach) m.window_left = -1;
  if (a.mods.window_right >= reach) m.window_right = -1;
  return m;
}

// The mask-family kernel's head_dim for a problem that uses the families (tile_policy.hpp,
// mask_kernel_head_dim), or the reason the sm90 forward declines it ("" and *d set when it takes it).
std::string mask_family_refusal(const Problem &a, int *d) {
  const std::string what = mask_family_in_use(a);
  *d = sm90::mask_kernel_head_dim(a.head_dim);
  if (a.varlen() && a.block_mask.kv_num_blocks)
    return "the sm90 forward takes block masks on fixed-length batches only";
  if (a.dtype != FLASHBOX_BFLOAT16) return "the sm90 forward runs " + what + " in bf16 only";
  if (*d == 0 || a.head_dim_v != a.head_dim)
    return "the sm90 forward runs " + what + " at head dims up to 128 with head_dim_v = head_dim (got " +
           std::to_string(a.head_dim) + " / " + std::to_string(a.head_dim_v) + ")";
  if (sm90::needs_score_mods(a)) return "the sm90 forward has no softcap or ALiBi with " + what;
  const detail::TuningOverrides &o = a.tuning.overrides;
  if (o.sm90_tile_m != 0 && (o.sm90_tile_m != 128 || o.sm90_tile_n != 128))
    return "the sm90 forward runs " + what + " on the tile 128x128 only";
  if (a.mods.chunk > INT32_MAX) return "the sm90 forward takes attention_chunk below 2^31";
  const flashbox_block_mask &bm = a.block_mask;
  if (bm.kv_num_blocks) {
    if (bm.q_block_size % cuda::kMaskTile != 0 || bm.kv_block_size % cuda::kMaskTile != 0)
      return "the sm90 forward takes block masks whose q_block_size and kv_block_size are multiples of " +
             std::to_string(cuda::kMaskTile) + " (got " + std::to_string(bm.q_block_size) + " x " +
             std::to_string(bm.kv_block_size) + ")";
    if (bm.q_block_size > INT32_MAX || bm.kv_block_size > INT32_MAX || bm.max_kv_blocks > INT32_MAX)
      return "the sm90 forward takes block-mask sizes below 2^31";
  }
  return "";
}

}  // namespace

PlanResult plan_sm90_forward(const Problem &a) {
  const bool varlen = a.varlen();
  // The mask families: their own kernels, or the reason (src/api then runs the sm80 family).
  const bool masks = !mask_family_in_use(a).empty();
  int mask_d = 0;
  if (masks)
    if (std::string why = mask_family_refusal(a, &mask_d); !why.empty()) return PlanResult::no(std::move(why));
  const int kd = sm90::serving_head_dim(a);  // the instantiation's list: 64, 96, 128, 192 or 256
  if (kd == 0)
    return PlanResult::no("the sm90 kernel takes head_dims that are multiples of 8 up to 256 (got " +
                          std::to_string(a.head_dim) + ")");
  // head_dim_v != head_dim: only the pairs with a kernel of their own (tile_policy.hpp, dv_kernel);
  // src/api runs the others on column slices of V. The override's tile, when set, must be the pair's
  // (another one declines: the split then runs at head_dim, which is how benchmarks time it).
  const sm90::DvKernel *dvk = sm90::dv_kernel(a.head_dim, a.head_dim_v);
  if (a.head_dim_v != a.head_dim) {
    if (dvk == nullptr)
      return PlanResult::no("the sm90 forward has no kernel for head_dim " + std::to_string(a.head_dim) +
                            " with head_dim_v " + std::to_string(a.head_dim_v));
    if (varlen)
      return PlanResult::no("the sm90 forward has no variable-length batches with head_dim_v != head_dim");
    const detail::TuningOverrides &o = a.tuning.overrides;
    if (o.sm90_tile_m != 0 && (o.sm90_tile_m != dvk->tile.bm || o.sm90_tile_n != dvk->tile.bn))
      return PlanResult::no("the sm90 forward's head_dim " + std::to_string(dvk->head_dim) + " / head_dim_v " +
                            std::to_string(dvk->head_dim_v) + " kernel has the tile " +
                            std::to_string(dvk->tile.bm) + "x" + std::to_string(dvk->tile.bn) + " only");
  }
  if (varlen && kd > 128)
    return PlanResult::no("the sm90 forward has no variable-length batches for head_dim above 128 (got " +
                          std::to_string(a.head_dim) + ")");
  if (varlen && (a.seqlen_q == 0 || a.seqlen_k == 0))
    return PlanResult::no("the sm90 forward needs at least one query and one key token in a variable-length batch");
  TileChoice tile;
  if (masks)
    tile = {128, 128};
  else if (!sm90::choose_tile(a, tile))
    return PlanResult::no("the sm90 forward has no tile " + std::to_string(a.tuning.overrides.sm90_tile_m) + "x" +
                              std::to_string(a.tuning.overrides.sm90_tile_n) + " for head_dim " +
                              std::to_string(a.head_dim) + " (" + tile_list(kd) + ")",
                          FLASHBOX_ERR_INVALID_ARGUMENT);
  const bool score_mods = sm90::needs_score_mods(a);
  if (score_mods && kd > 128)
    return PlanResult::no("the sm90 forward has no softcap or ALiBi for head_dim above 128 (got " +
                          std::to_string(a.head_dim) + "; the sm80 family may take it)");
  if (score_mods && !sm90::has_score_mods(a, tile))
    return PlanResult::no("the sm90 forward has softcap and ALiBi only in its default tile for head_dim " +
                          std::to_string(a.head_dim) + " (" + tile_list(kd).substr(0, tile_list(kd).find(',')) +
                          "), not " +
                          std::to_string(tile.bm) + "x" + std::to_string(tile.bn));
  if (const char *reason = sm90::sm90_unavailable_reason()) return PlanResult::no(reason);
  // The kernel that runs (192's 128x64: the 256 one; 96's 128x176: the 128 one; the mask families:
  // their own 64 or 128 one).
  const int d = masks ? mask_d : sm90::instantiation(kd, tile);
  const int dv = dvk != nullptr ? dvk->head_dim_v : d;  // its DV
  // Varlen: at most total_q / BM + batch query blocks (each sequence's last may be partial).
  const int64_t max_entries = varlen ? a.seqlen_q / tile.bm + a.batch : 0;
  const int64_t tiles = varlen ? max_entries * a.heads_q : a.batch * a.heads_q * ((a.seqlen_q + tile.bm - 1) / tile.bm);
  if (tiles > INT32_MAX) return PlanResult::no("more than 2^31 - 1 query tiles");
  if (a.seqlen_q > INT32_MAX / 2 || a.seqlen_k > INT32_MAX / 2)
    return PlanResult::no("sequence too long for 32-bit TMA coordinates");
  const TensorView q = sm90::attention_view(a.q, a.seqlen_q, a.heads_q, a.batch, a.q_stride, varlen);
  const TensorView k = sm90::attention_view(a.k, a.seqlen_k, a.heads_kv, a.batch, a.k_stride, varlen);
  const TensorView v = sm90::attention_view(a.v, a.seqlen_k, a.heads_kv, a.batch, a.v_stride, varlen);
  const TensorView o = sm90::attention_view(a.o, a.seqlen_q, a.heads_q, a.batch, a.o_stride, varlen);
  if (!tma_describable(q) || !tma_describable(k) || !tma_describable(v) || !tma_describable(o))
    return PlanResult::no(
        "TMA needs 16-byte aligned q/k/v/o and batch/seq/head strides that are multiples of 16 bytes");

  FwdParams p;
  std::memset(&p, 0, sizeof p);
  const CUtensorMapDataType type =
      a.dtype == FLASHBOX_BFLOAT16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  if (!encode_map(&p.tm_q, &p.ord_q, type, q, a.head_dim, tile.bm) ||
      !encode_map(&p.tm_k, &p.ord_k, type, k, a.head_dim, tile.bn) ||
      !encode_map(&p.tm_v, &p.ord_v, type, v, a.head_dim_v, tile.bn, dv == 96 ? 32 : 64) ||
      !encode_map(&p.tm_o, &p.ord_o, type, o, a.head_dim_v, 64))
    return PlanResult::no("cuTensorMapEncodeTiled rejected the layout of q/k/v/o");
  p.lse = a.lse;
  p.seqlen_q = int(a.seqlen_q);
  p.seqlen_k = int(a.seqlen_k);
  p.heads_q = int(a.heads_q);
  p.group = int(a.group);
  p.num_m_blocks = varlen ? 1 : int((a.seqlen_q + tile.bm - 1) / tile.bm);
  p.num_tiles = int(tiles);  // varlen: an upper bound; the list's tile_count is the real one
  p.section_heads = 1;       // one tile per CTA: the plain order (head by head, longest first)
  p.scale = a.scale;
  p.scale_log2 = a.scale_log2;
  p.mods = kernel_mods(a);
  p.inv_scale = 1.0f / a.scale;
  if (p.mods.capped()) p.cap_pre = a.scale * p.mods.softcap_inv;
  p.o = a.o;
  p.o_seq = a.o_stride[1], p.o_head = a.o_stride[2];
  p.head_dim_v = int(a.head_dim_v);  // the columns the varlen partial store writes (the kernel's DV may be larger)
  p.sinks = a.mods.sinks;
  sm90::VarlenListArgs list{};
  if (varlen) {
    p.cu_q = a.cu_seqlens_q, p.cu_k = a.cu_seqlens_k;
    p.total_q = int(a.seqlen_q), p.total_k = int(a.seqlen_k);
    p.max_q = int(std::min<int64_t>(a.max_seqlen_q, INT32_MAX)), p.max_k = int(std::min<int64_t>(a.max_seqlen_k, INT32_MAX));
    list = {p.cu_q, p.cu_k, int(a.batch), p.total_q, p.total_k, p.max_q, p.max_k, tile.bm, tile.bn, int(a.heads_q),
            int(max_entries), p.mods, nullptr, nullptr};
  }
  // The mask families: the tables, and with document ids a doc span per (batch entry or sequence,
  // query block): num_m_blocks a row, or varlen as many as the longest sequence has (varlen_span
  // clamps a sequence to max_q and total_q tokens).
  sm90::DocSpanArgs spans{};
  int64_t span_count = 0;
  if (masks) {
    p.ext = cuda::device_mask_ext(a);
    p.o_batch = a.o_stride[0];
    p.doc_span_blocks = varlen ? int((std::min<int64_t>(p.max_q, p.total_q) + tile.bm - 1) / tile.bm) : p.num_m_blocks;
    if (p.ext.doc_q) {
      span_count = a.batch * p.doc_span_blocks;
      spans = {p.ext,     int(a.batch), p.seqlen_q, p.seqlen_k, tile.bm, p.doc_span_blocks, p.cu_q, p.cu_k,
               p.total_q, p.total_k,    p.max_q,    p.max_k,    nullptr};
    }
  }

  dim3 grid(unsigned(p.num_tiles));
  // Varlen: always persistent (the list's order is for the snake; a grid of the upper bound would
  // launch a CTA for every slot the list leaves empty).
  const bool persistent = varlen || sm90::persistent_schedule(a);
  if (persistent) {
    grid.x = sm90::persistent_grid(a, p.num_tiles);
    p.section_heads = varlen ? 1 : sm90::l2_section_heads(a);
    p.separate_o = 1;  // the launch reserves the O buffer only where it fits (launch_config)
  }

  std::string name =
      "cuda_flash_sm90_d" + std::to_string(d) + (dv != d ? "_dv" + std::to_string(dv) : std::string()) + "_" +
      std::to_string(tile.bm) + "x" + std::to_string(tile.bn);
  if (masks)
    name += "_masks";
  else if (sm90::q_in_registers(kd, tile.bn))
    name += "_qreg";
  if (p.mods.window_left >= 0 || (p.mods.window_right >= 0 && !a.causal)) name += "_window";
  if (p.mods.capped()) name += "_softcap";
  if (p.mods.alibi()) name += "_alibi";
  if (p.sinks) name += "_sink";
  if (varlen) name += "_varlen";
  if (persistent) {
    name += "_persistent";
    if (!sm90::o_buffer_fits(tile.bm, tile.bn, sm90::layout_head_dim(d), sm90::layout_head_dim(dv), 2)) name += "_oq";
  }

  const bool bf16 = a.dtype == FLASHBOX_BFLOAT16;
  const cudaStream_t stream = static_cast<cudaStream_t>(a.stream);
  // Scratch: varlen, the tile count (16 bytes, keeping the tiles aligned), then the tiles; with
  // document ids, then the doc spans.
  const int64_t list_bytes = varlen ? 16 + 8 * max_entries * a.heads_q : 0;
  const int64_t scratch_bytes = list_bytes + 8 * span_count;
  return {Plan{std::move(name), scratch_bytes,
               [p, tile, grid, bf16, d, dv, score_mods, masks, stream, list, spans, span_count, list_bytes,
                scratch_bytes]() mutable -> int {
                 cuda::DeviceScratch scratch(stream);
                 if (scratch_bytes > 0) {
                   cudaError_t e = scratch.allocate(scratch_bytes);
                   if (e == cudaErrorMemoryAllocation)
                     return fail(FLASHBOX_ERR_OUT_OF_MEMORY,
                                 "sm90 forward: cannot allocate " + std::to_string(scratch_bytes) + " bytes for the " +
                                     (list_bytes > 0 ? "variable-length tile list" : "document spans"));
                   const char *step = "varlen tile list";
                   if (e == cudaSuccess && list_bytes > 0) {
                     p.tile_count = list.tile_count = scratch.as<int>();
                     p.tiles = list.entries = reinterpret_cast<int2 *>(scratch.as<uint8_t>() + 16);
                     e = sm90::launch_varlen_tile_list(list, stream);
                   }
                   if (e == cudaSuccess && span_count > 0) {
                     step = "document spans";
                     p.doc_spans = spans.spans = reinterpret_cast<int2 *>(scratch.as<uint8_t>() + list_bytes);
                     e = sm90::launch_doc_spans(spans, stream);
                   }
                   if (e != cudaSuccess) {
                     cudaGetLastError();
                     return fail(FLASHBOX_ERR_CUDA,
                                 std::string("sm90 forward: ") + step + " failed: " + cudaGetErrorString(e));
                   }
                 }
                 const cudaError_t e = masks      ? sm90::launch_fwd_masks(d, p, grid, stream)
                                       : dv != d  ? sm90::launch_fwd_dv(bf16, d, dv, p, grid, stream)
                                       : d == 64  ? sm90::launch_fwd_d64(bf16, tile, score_mods, p, grid, stream)
                                       : d == 96  ? sm90::launch_fwd_d96(bf16, p, grid, stream)
                                       : d == 128 ? sm90::launch_fwd_d128(bf16, tile, score_mods, p, grid, stream)
                                       : d == 192 ? sm90::launch_fwd_d192(bf16, p, grid, stream)
                                                  : sm90::launch_fwd_d256(bf16, p, grid, stream);
                 if (e != cudaSuccess) {
                   cudaGetLastError();
                   return fail(FLASHBOX_ERR_CUDA, std::string("sm90 forward: launch failed: ") + cudaGetErrorString(e));
                 }
                 return FLASHBOX_OK;
               }}};
}

}  // namespace flashbox::detail
