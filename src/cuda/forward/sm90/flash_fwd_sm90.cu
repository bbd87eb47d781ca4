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
// when a row max grows past 2^8); FLASHBOX_SM90_SCHED = grid|persistent (grid: one CTA per tile;
// persistent: one CTA per SM walking a static share of the tiles; default below, schedule());
// FLASHBOX_SM90_L2MB = N: MB of K/V per head section of the persistent order (default below,
// l2_section_heads());
// FLASHBOX_SM90_CTAS = N caps the persistent grid (tests use it to give each CTA many tiles);
// FLASHBOX_SM90_OSTAGE = q stages O in the Q rows even when a persistent CTA has room for its own O
// buffer (for measurement).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include <cuda.h>
#include <cuda_runtime.h>

#include "api/backends.hpp"
#include "core/call_state.hpp"
#include "core/error.hpp"
#include "cuda/forward/sm90/flash_fwd_sm90_launch.hpp"
#include "cuda/hopper/tma_host.hpp"

namespace flashbox::detail {
namespace {

using sm90::FwdParams;
using sm90::TileChoice;
using sm90::TensorView;
using sm90::TmaOrder;
using sm90::encode_map;
using sm90::tma_describable;

// Measured on the H200 (bench/NOTES.md, Hopper): head_dim 64 runs fastest at 192 x 128 (three
// consumer warpgroups), head_dim 128 at 128 x 128 with Q in registers, causal or not (FA3's
// non-causal 128 x 176 was faster before the optimistic softmax, equal after it on the grid, and
// cannot stage O in its own buffer on the persistent grid: session 4).
// FLASHBOX_SM90_TILE overrides, for the benchmark's sweep.
TileChoice choose_tile(const flashbox_attention_args &a) {
  const TileChoice tile = a.head_dim == 64 ? TileChoice{192, 128} : TileChoice{128, 128};
  const char *env = std::getenv("FLASHBOX_SM90_TILE");
  if (env == nullptr) return tile;
  static constexpr TileChoice d64[] = {{128, 128}, {192, 128}}, d128[] = {{128, 128}, {128, 176}};
  for (const TileChoice t : a.head_dim == 64 ? d64 : d128)
    if (std::string(env) == std::to_string(t.bm) + "x" + std::to_string(t.bn)) return t;
  return tile;
}

// K and V bytes of one (batch, head): what a head's tiles share in L2.
int64_t kv_bytes_per_head(const flashbox_attention_args &a) { return a.seqlen_k * a.head_dim * 2 * 2; }

// Persistent: one CTA per SM (or FLASHBOX_SM90_CTAS), each walking many tiles; else one CTA per
// tile. Default by measurement (bench/NOTES.md, Hopper, runs 4-5; re-checked in sessions 3 and 4):
// non-causal always persistent (equal tiles balance; hiding each tile's start and end: D128
// T = 16384 699 against 671 TFLOP/s on the grid, session 4); causal persistent while a head's K
// and V take at most 4 MB (D64 up to T = 16384, D128 up to 8192), where hiding each tile's start and
// end wins (+27% D64 and +15% D128 at T = 2048); beyond, one CTA per tile, whose hardware dispatch
// balances the unequal causal tiles (D128 T = 16384: 591 against 570 TFLOP/s persistent).
enum class Sched { grid, persistent };
Sched schedule(const flashbox_attention_args &a) {
  const char *sched = std::getenv("FLASHBOX_SM90_SCHED");
  if (sched != nullptr && std::strcmp(sched, "persistent") == 0) return Sched::persistent;
  if (std::getenv("FLASHBOX_SM90_CTAS") != nullptr) return Sched::persistent;
  if (sched != nullptr && std::strcmp(sched, "grid") == 0) return Sched::grid;
  if (!a.causal) return Sched::persistent;
  return kv_bytes_per_head(a) <= (int64_t(4) << 20) ? Sched::persistent : Sched::grid;
}

unsigned persistent_grid(int num_tiles) {
  int ctas = 0;
  if (const char *cap = std::getenv("FLASHBOX_SM90_CTAS")) ctas = std::atoi(cap);
  if (ctas <= 0) {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&ctas, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
      cudaGetLastError();
      ctas = num_tiles;
    }
  }
  return unsigned(std::max(1, std::min(ctas, num_tiles)));
}

// (batch, head) pairs per L2 section of the persistent order: as many whole heads' K and V as fit
// in the budget, FLASHBOX_SM90_L2MB = N MB; 0 = one head per section, i.e. the grid's order (head
// by head, longest query block first). Default by measurement (run 5, bench/sm90_sched.py): one
// head per section, where 32 MB sections (FA3's figure) measured 8-12% slower for head_dim 128 at
// T = 2048-8192 and 5% slower for head_dim 64 at 4096 (the snake over rounds then deals one CTA the
// long tiles of several sections in a row); 32 MB for head_dim 64 above 1 MB of K/V per head (T >
// 4096), where one head per section measured 4% slower.
int l2_section_heads(const flashbox_attention_args &a) {
  int64_t budget = a.head_dim == 64 && kv_bytes_per_head(a) > (int64_t(1) << 20) ? int64_t(32) << 20 : 0;
  if (const char *mb = std::getenv("FLASHBOX_SM90_L2MB")) budget = int64_t(std::max(0, std::atoi(mb))) << 20;
  const int64_t kv_bytes = kv_bytes_per_head(a);
  const int64_t heads_total = a.batch * a.heads_q;
  return int(std::clamp<int64_t>(budget / std::max<int64_t>(kv_bytes, 1), 1, heads_total));
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
  if (const char *reason = sm90::sm90_unavailable_reason()) return no(reason);
  if (a.batch * a.heads_q * ((a.seqlen_q + tile.bm - 1) / tile.bm) > INT32_MAX)
    return no("more than 2^31 - 1 query tiles");
  if (a.seqlen_q > INT32_MAX / 2 || a.seqlen_k > INT32_MAX / 2) return no("sequence too long for 32-bit TMA coordinates");
  const TensorView q{a.q, a.seqlen_q, a.heads_q, a.batch, a.q_stride};
  const TensorView k{a.k, a.seqlen_k, a.heads_kv, a.batch, a.k_stride};
  const TensorView v{a.v, a.seqlen_k, a.heads_kv, a.batch, a.v_stride};
  const TensorView o{a.o, a.seqlen_q, a.heads_q, a.batch, a.o_stride};
  if (!tma_describable(q) || !tma_describable(k) || !tma_describable(v) || !tma_describable(o))
    return no("TMA needs 16-byte aligned q/k/v/o and batch/seq/head strides that are multiples of 16 bytes");
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
  dim3 grid(unsigned(p.num_tiles));
  const Sched sched = schedule(a);
  const bool persistent = sched != Sched::grid;
  if (persistent) {
    grid.x = persistent_grid(p.num_tiles);
    p.section_heads = l2_section_heads(a);
    const char *ostage = std::getenv("FLASHBOX_SM90_OSTAGE");
    p.separate_o = !(ostage != nullptr && std::strcmp(ostage, "q") == 0);  // the kernel: only if it fits
  }
  const bool bf16 = a.dtype == FLASHBOX_BFLOAT16;
  const cudaStream_t stream = static_cast<cudaStream_t>(a.stream);
  const cudaError_t e = a.head_dim == 64 ? sm90::launch_fwd_d64(bf16, tile, p, grid, stream)
                                         : sm90::launch_fwd_d128(bf16, tile, p, grid, stream);
  if (e != cudaSuccess)
    return fail(FLASHBOX_ERR_CUDA, std::string("cuda_flash_forward_sm90: launch failed: ") + cudaGetErrorString(e));
  std::string name = "cuda_flash_sm90_d" + std::to_string(a.head_dim) + "_" + std::to_string(tile.bm) + "x" +
                     std::to_string(tile.bn);
  if (sm90::q_in_registers(int(a.head_dim), tile.bn)) name += "_qreg";
  if (std::strcmp(mode_name(), "pingpong") != 0) name += std::string("_") + mode_name();
  if (p.lazy_rescale_log2 == 0.f) name += "_rescale_always";
  if (persistent) {
    name += "_persistent";
    if (!(p.separate_o && sm90::o_buffer_fits(tile.bm, tile.bn, int(a.head_dim), 2))) name += "_oq";
  }
  set_kernel_name(name);
  return FLASHBOX_OK;
}

}  // namespace flashbox::detail
