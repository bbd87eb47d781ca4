// Host side of the Hopper forward: what it supports, tensor maps, tile choice, launch.
//
// q, k, v and o are described to the TMA as 4-D tensors {head_dim, and the seq, head and batch
// dimensions ordered by stride}, so BTHD, BHTD and strided slices all work as long as the base is
// 16-byte aligned and every stride that matters is a multiple of 16 bytes; otherwise supports()
// says why and dispatch falls back to the sm80 kernel. cuTensorMapEncodeTiled comes from the driver
// through the runtime's entry-point query, so nothing links libcuda.
//
// Environment (benchmarks and tests): FLASHBOX_SM90_TILE = 128x128|192x128 (head_dim 64),
// 128x128|128x176 (head_dim 128); FLASHBOX_SM90_MODE = serial|overlap|pingpong (default: pingpong,
// i.e. overlap + ping-pong); FLASHBOX_SM90_RESCALE = lazy|always (default lazy: O is rescaled only
// when a row max grows past 2^8). One CTA per tile: the persistent grid the kernel's tile loop was
// written for hung on the H200 and is not offered (bench/NOTES.md, Hopper).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include <cuda.h>
#include <cuda_runtime.h>

#include "api/backends.hpp"
#include "api/call_state.hpp"
#include "api/error.hpp"
#include "cuda/sm90/flash_fwd_sm90_launch.hpp"
#include "cuda/sm90/tma_host.hpp"

namespace flashbox::detail {
namespace {

using sm90::FwdParams;
using sm90::TileChoice;
using sm90::TensorView;
using sm90::TmaOrder;
using sm90::encode_map;
using sm90::tma_describable;

// Measured on the H200 (bench/NOTES.md, Hopper): head_dim 64 runs fastest at 192 x 128 (three
// consumer warpgroups), head_dim 128 at 128 x 128 causal and 128 x 176 non-causal (as FA3 chose).
// FLASHBOX_SM90_TILE overrides, for the benchmark's sweep.
TileChoice choose_tile(const flashbox_attention_args &a) {
  const TileChoice tile = a.head_dim == 64 ? TileChoice{192, 128} : TileChoice{128, a.causal ? 128 : 176};
  const char *env = std::getenv("FLASHBOX_SM90_TILE");
  if (env == nullptr) return tile;
  static constexpr TileChoice d64[] = {{128, 128}, {192, 128}}, d128[] = {{128, 128}, {128, 176}};
  for (const TileChoice t : a.head_dim == 64 ? d64 : d128)
    if (std::string(env) == std::to_string(t.bm) + "x" + std::to_string(t.bn)) return t;
  return tile;
}

const char *mode_name() {
  const char *env = std::getenv("FLASHBOX_SM90_MODE");
  if (env != nullptr && (std::strcmp(env, "serial") == 0 || std::strcmp(env, "overlap") == 0)) return env;
  return "pingpong";
}

// Everything the kernel needs, or false with the reason TMA / this kernel cannot take the call.
bool build_params(const flashbox_attention_args &a, TileChoice tile, FwdParams &p, const char **why) {
  const auto no = [&](const char *reason) {
    if (why != nullptr) *why = reason;
    return false;
  };
  if (a.dtype != FLASHBOX_BFLOAT16 && a.dtype != FLASHBOX_FLOAT16) return no("the sm90 kernel takes bf16 or fp16");
  if (a.head_dim != 64 && a.head_dim != 128) return no("the sm90 kernel takes head_dim 64 or 128");
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
    cudaGetLastError();
    return no("no CUDA device to query");
  }
  if (major != 9 || minor != 0) return no("the sm90 kernel is built for sm_90a and needs compute capability 9.0");
  if (a.batch * a.heads_q * ((a.seqlen_q + tile.bm - 1) / tile.bm) > INT32_MAX)
    return no("more than 2^31 - 1 query tiles");
  if (a.seqlen_q > INT32_MAX / 2 || a.seqlen_k > INT32_MAX / 2) return no("sequence too long for 32-bit TMA coordinates");
  const TensorView q{a.q, a.seqlen_q, a.heads_q, a.batch, a.q_stride};
  const TensorView k{a.k, a.seqlen_k, a.heads_kv, a.batch, a.k_stride};
  const TensorView v{a.v, a.seqlen_k, a.heads_kv, a.batch, a.v_stride};
  const TensorView o{a.o, a.seqlen_q, a.heads_q, a.batch, a.o_stride};
  if (!tma_describable(q) || !tma_describable(k) || !tma_describable(v) || !tma_describable(o))
    return no("TMA needs 16-byte aligned q/k/v/o and batch/seq/head strides that are multiples of 16 bytes");
  if (!sm90::tma_available()) return no("the driver does not provide cuTensorMapEncodeTiled");
  const CUtensorMapDataType type =
      a.dtype == FLASHBOX_BFLOAT16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  std::memset(&p, 0, sizeof p);
  if (!encode_map(&p.tm_q, &p.ord_q, type, q, a.head_dim, tile.bm) ||
      !encode_map(&p.tm_k, &p.ord_k, type, k, a.head_dim, tile.bn) ||
      !encode_map(&p.tm_v, &p.ord_v, type, v, a.head_dim, tile.bn) ||
      !encode_map(&p.tm_o, &p.ord_o, type, o, a.head_dim, 64))
    return no("cuTensorMapEncodeTiled rejected the layout of q/k/v/o");
  p.lse = a.lse;
  p.seqlen_q = int(a.seqlen_q);
  p.seqlen_k = int(a.seqlen_k);
  p.heads_q = int(a.heads_q);
  p.group = int(a.heads_q / a.heads_kv);
  p.num_m_blocks = int((a.seqlen_q + tile.bm - 1) / tile.bm);
  p.num_tiles = int(a.batch * a.heads_q * p.num_m_blocks);
  p.section_heads = 1;  // one tile per CTA: the plain order (head by head, longest first)
  p.causal = a.causal;
  const char *mode = mode_name();
  p.overlap = std::strcmp(mode, "serial") != 0;
  p.pingpong = std::strcmp(mode, "pingpong") == 0;
  p.scale = a.softmax_scale != 0.f ? a.softmax_scale : 1.f / std::sqrt(float(a.head_dim));
  p.scale_log2 = p.scale * 1.4426950408889634f;
  const char *rescale = std::getenv("FLASHBOX_SM90_RESCALE");
  p.lazy_rescale_log2 = rescale != nullptr && std::strcmp(rescale, "always") == 0 ? 0.f : 8.f;
  return true;
}

}  // namespace

bool cuda_flash_sm90_supports(const flashbox_attention_args &a, const char **why_not) {
  FwdParams p;
  return build_params(a, choose_tile(a), p, why_not);
}

int cuda_flash_forward_sm90(const flashbox_attention_args &a) {
  const TileChoice tile = choose_tile(a);
  FwdParams p;
  const char *why = nullptr;
  if (!build_params(a, tile, p, &why))
    return fail(FLASHBOX_ERR_UNSUPPORTED_IMPL, std::string("cuda_flash_forward_sm90: ") + why);
  const dim3 grid(unsigned(p.num_tiles));
  const bool bf16 = a.dtype == FLASHBOX_BFLOAT16;
  const cudaStream_t stream = static_cast<cudaStream_t>(a.stream);
  const cudaError_t e = a.head_dim == 64 ? sm90::launch_fwd_d64(bf16, tile, p, grid, stream)
                                         : sm90::launch_fwd_d128(bf16, tile, p, grid, stream);
  if (e != cudaSuccess)
    return fail(FLASHBOX_ERR_CUDA, std::string("cuda_flash_forward_sm90: launch failed: ") + cudaGetErrorString(e));
  std::string name = "cuda_flash_sm90_d" + std::to_string(a.head_dim) + "_" + std::to_string(tile.bm) + "x" +
                     std::to_string(tile.bn);
  if (std::strcmp(mode_name(), "pingpong") != 0) name += std::string("_") + mode_name();
  if (p.lazy_rescale_log2 == 0.f) name += "_rescale_always";
  set_kernel_name(name);
  return FLASHBOX_OK;
}

}  // namespace flashbox::detail
